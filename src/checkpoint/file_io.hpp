#pragma once
// Private POSIX file helpers of the checkpoint layer: whole-buffer pread/pwrite, fsync of files
// and directories, small files written durably, and renames that replace atomically. Every
// failure throws CheckpointError naming the path, the operation and errno's text.

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace hpctrain::checkpoint::io {

/// An open file descriptor, closed on destruction. Move-only. Local.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset();

 private:
  int fd_ = -1;
};

/// Opens `path` with open(2) `flags` (mode 0644 when creating); throws naming `path`. Local.
Fd open_file(const std::string& path, int flags);
/// Opens an existing checkpoint file read-only after checking, without opening it, that it is a
/// regular file (runtime::require_regular_file: a FIFO would block the open); throws
/// CheckpointError naming `path`. Local.
Fd open_regular(const std::string& path);
/// Throws CheckpointError naming `path` unless it is a regular file; never opens it. Local.
void require_regular(const std::string& path);
/// Writes all `bytes` at `offset` (pwrite, retried on short writes and EINTR). Local.
void write_at(int fd, const void* data, std::size_t bytes, off_t offset, const std::string& path);
/// Reads exactly `bytes` at `offset`; throws if the file ends first. Local.
void read_at(int fd, void* data, std::size_t bytes, off_t offset, const std::string& path);
/// fsync(2) of an open descriptor. Local.
void sync_fd(int fd, const std::string& path);
/// Asks the kernel to drop the (clean: fsynced) pages of `path` from the page cache, so that a
/// checkpoint does not evict what training reads, and its freed pages serve the next save.
/// Best effort. Local.
void drop_cache(const std::string& path);
/// Opens `path` (file or directory) read-only and fsyncs it. Local.
void sync_path(const std::string& path);
/// The whole file as a string; throws naming `path` (and `what`) when it cannot be read. Local.
std::string read_file(const std::string& path);
/// Creates `path` (which must not exist) holding `content`, fsynced. Local.
void write_file_synced(const std::string& path, const std::string& content);
/// Replaces `path` atomically with `content`: writes `path` + suffix, fsyncs it, renames it over
/// `path` and fsyncs the directory. A crash leaves either the old or the new content. Local.
void replace_file(const std::string& path, const std::string& content, const std::string& suffix);
/// rename(2); throws naming both paths. Local.
void rename_path(const std::string& from, const std::string& to);
/// Swaps two existing directory entries atomically (renameat2 RENAME_EXCHANGE). Returns false
/// when the filesystem does not support it (the caller falls back); throws on other errors.
/// Local.
bool exchange_paths(const std::string& a, const std::string& b);
/// mkdir(2) with mode 0755 (`exist_ok`: an existing directory is fine). Local.
void make_dir(const std::string& path, bool exist_ok);
/// Removes a directory tree; returns an error text, empty on success (missing is success). Local.
std::string remove_tree(const std::string& path);
/// The parent directory of `path` ("." when it has none). Local.
std::string parent_dir(const std::string& path);
/// errno's text: "No space left on device (errno 28)". Local.
std::string errno_text(int err);

}  // namespace hpctrain::checkpoint::io
