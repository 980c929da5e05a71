#include "hpctrain/runtime/regular_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

[[noreturn]] void fail(FileKind kind, const std::string& message) {
  switch (kind) {
    case FileKind::kData: throw DataError(message);
    case FileKind::kCheckpoint: throw CheckpointError(message);
    case FileKind::kConfig: break;
  }
  throw ConfigError(message);
}

}  // namespace

PathType path_type(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return PathType::kMissing;
  if (S_ISREG(st.st_mode)) return PathType::kRegular;
  if (S_ISDIR(st.st_mode)) return PathType::kDirectory;
  if (S_ISFIFO(st.st_mode)) return PathType::kFifo;
  if (S_ISCHR(st.st_mode)) return PathType::kCharDevice;
  if (S_ISBLK(st.st_mode)) return PathType::kBlockDevice;
  if (S_ISSOCK(st.st_mode)) return PathType::kSocket;
  return PathType::kOther;
}

const char* path_type_name(PathType type) {
  switch (type) {
    case PathType::kMissing: return "missing";
    case PathType::kRegular: return "a regular file";
    case PathType::kDirectory: return "a directory";
    case PathType::kFifo: return "a FIFO";
    case PathType::kCharDevice: return "a character device";
    case PathType::kBlockDevice: return "a block device";
    case PathType::kSocket: return "a socket";
    case PathType::kOther: break;
  }
  return "not a file";
}

void require_regular_file(const std::string& path, FileKind kind, const std::string& what,
                          const std::string& fix) {
  const PathType type = path_type(path);
  if (type == PathType::kRegular) return;
  const std::string tail = fix.empty() ? std::string() : ": " + fix;
  if (type == PathType::kMissing) fail(kind, str(what, " '", clip(path), "' does not exist", tail));
  fail(kind,
       str(what, " '", clip(path), "' is not a regular file (", path_type_name(type), ")", tail));
}

void require_readable_directory(const std::string& path, FileKind kind, const std::string& what,
                                const std::string& fix) {
  const PathType type = path_type(path);
  const std::string tail = fix.empty() ? std::string() : ": " + fix;
  if (type == PathType::kMissing) fail(kind, str(what, " '", clip(path), "' does not exist", tail));
  if (type != PathType::kDirectory) {
    fail(kind,
         str(what, " '", clip(path), "' is not a directory (", path_type_name(type), ")", tail));
  }
  if (::access(path.c_str(), R_OK | X_OK) != 0) {
    fail(kind, str(what, " '", clip(path), "' cannot be read (", std::strerror(errno), ")", tail));
  }
}

bool require_regular_file_if_present(const std::string& path, FileKind kind,
                                     const std::string& what, const std::string& fix) {
  if (path_type(path) == PathType::kMissing) return false;
  require_regular_file(path, kind, what, fix);
  return true;
}

}  // namespace hpctrain::runtime
