#include "run_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {
namespace {

std::string cause_of(int err) {
  return str(std::strerror(err), " (errno ", err, ")");
}

std::string advice_for(int err) {
  switch (err) {
    case EROFS: return "the file system is mounted read-only: choose a run.dir on a writable one";
    case EACCES:
    case EPERM:
      return "the job's user may not write there: fix the permissions or choose another run.dir";
    case ENOTDIR:
    case EEXIST:
      return "a file (not a directory) is in the way: remove it or choose another run.dir";
    case ENAMETOOLONG: return "the path or one of its names is too long: choose a shorter run.dir";
    case ENOSPC:
    case EDQUOT:
      return "the file system is full (or over quota): free space or choose another run.dir";
    default: return "choose another run.dir";
  }
}

[[noreturn]] void refuse(const std::string& dir, int err) {
  throw ConfigError(
      str("run.dir = ", clip(dir), " cannot be used: ", cause_of(err), ": ", advice_for(err)));
}

}  // namespace

void create_run_dir(const std::string& dir) {
  // mkdir -p by hand, so that the errno of the component that failed reaches the message.
  std::filesystem::path path(dir);
  std::filesystem::path partial;
  for (const auto& part : path) {
    partial /= part;
    const std::string p = partial.string();
    if (p.empty() || p == "/") continue;
    if (::mkdir(p.c_str(), 0755) == 0) continue;
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    refuse(dir, err == EEXIST ? ENOTDIR : err);
  }
  // An existing directory may still refuse writes (read-only mount, permissions).
  const std::string probe = dir + "/.hpctrain-write-test";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) refuse(dir, errno);
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string write_run_file(const std::string& path, const std::string& content) {
  const std::string temp = path + ".tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return str("cannot create ", temp, ": ", cause_of(errno));
  const char* p = content.data();
  std::size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(temp.c_str());
      return str("cannot write ", temp, ": ", cause_of(err));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return str("cannot write ", temp, ": ", cause_of(err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return str("cannot rename ", temp, " to ", path, ": ", cause_of(err));
  }
  return {};
}

}  // namespace hpctrain::train
