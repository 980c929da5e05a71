#include "file_io.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::checkpoint::io {
namespace {

// Linux moves at most 0x7ffff000 bytes per read/write call; stay well below.
constexpr std::size_t kMaxIo = std::size_t{1} << 30;

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw CheckpointError(str(what, " '", path, "' failed: ", errno_text(err),
                            err == ENOSPC || err == EDQUOT
                                ? ": free space (or quota) on that filesystem, or lower "
                                  "checkpoint.keep"
                            : (err == EACCES || err == EPERM || err == EROFS)
                                ? ": check the permissions of the run directory"
                                : ""));
}

// Test hook HPCTRAIN_TEST_IO_TRACE=FILE: each fsync, rename and durable write of the commit
// protocol appends one line "<operation> <path> [<path>]" to FILE after the system call
// succeeded, so a test can check that everything is made durable before it is published, in
// order. One write(2) per line with O_APPEND: lines of concurrent threads and ranks do not mix.
void trace(const char* operation, const std::string& a, const std::string& b = std::string()) {
  static const int fd = [] {
    const char* path = std::getenv("HPCTRAIN_TEST_IO_TRACE");
    if (path == nullptr || *path == '\0') return -1;
    return ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }();
  if (fd < 0) return;
  std::string line = str(operation, " ", a, b.empty() ? "" : " ", b, "\n");
  ssize_t ignored = ::write(fd, line.data(), line.size());
  (void)ignored;
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text(int err) {
  return str(std::strerror(err), " (errno ", err, ")");
}

Fd open_file(const std::string& path, int flags) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail("opening", path, errno);
  return Fd(fd);
}

void require_regular(const std::string& path) {
  runtime::require_regular_file(
      path, runtime::FileKind::kCheckpoint, "checkpoint file",
      "a checkpoint holds regular files only: it was damaged or replaced; resume from another "
      "checkpoint");
}

Fd open_regular(const std::string& path) {
  require_regular(path);
  return open_file(path, O_RDONLY);
}

void write_at(int fd, const void* data, std::size_t bytes, off_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min(bytes, kMaxIo), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing", path, errno);
    }
    if (n == 0) fail("writing", path, EIO);
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
}

void read_at(int fd, void* data, std::size_t bytes, off_t offset, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, p, std::min(bytes, kMaxIo), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("reading", path, errno);
    }
    if (n == 0) {
      throw CheckpointError(str("reading '", path, "': the file ends at byte ", offset, " but ",
                                bytes,
                                " more bytes were expected there: the file is "
                                "truncated; resume from another checkpoint"));
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += n;
  }
}

void sync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) fail("fsync of", path, errno);
  trace("fsync", path);
}

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void sync_path(const std::string& path) {
  Fd fd = open_file(path, O_RDONLY);
  sync_fd(fd.get(), path);
}

std::string read_file(const std::string& path) {
  Fd fd = open_regular(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("stat of", path, errno);
  std::string content(static_cast<std::size_t>(st.st_size), '\0');
  read_at(fd.get(), content.data(), content.size(), 0, path);
  return content;
}

void write_file_synced(const std::string& path, const std::string& content) {
  Fd fd = open_file(path, O_WRONLY | O_CREAT | O_EXCL);
  write_at(fd.get(), content.data(), content.size(), 0, path);
  sync_fd(fd.get(), path);
}

void replace_file(const std::string& path, const std::string& content, const std::string& suffix) {
  const std::string temp = path + suffix;
  ::unlink(temp.c_str());
  write_file_synced(temp, content);
  rename_path(temp, path);
  sync_path(parent_dir(path));
}

void rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail(str("renaming to '", to, "' from"), from, errno);
  trace("rename", from, to);
}

bool exchange_paths(const std::string& a, const std::string& b) {
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) {
    trace("exchange", a, b);
    return true;
  }
  const int err = errno;
  if (err == EINVAL || err == ENOSYS || err == ENOTSUP) return false;
  fail(str("exchanging '", b, "' with"), a, err);
}

void make_dir(const std::string& path, bool exist_ok) {
  if (::mkdir(path.c_str(), 0755) == 0) return;
  const int err = errno;
  struct stat st {};
  if (err == EEXIST && exist_ok && ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  fail("creating directory", path, err);
}

std::string remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  return ec ? str("cannot remove '", path, "': ", ec.message()) : std::string();
}

std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace hpctrain::checkpoint::io
