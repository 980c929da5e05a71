#pragma once
// The one check that a path hpctrain is about to open for reading (a file of a run directory, of a
// checkpoint, of a data path, a config, a plugin or TorchScript module) is a regular file. It
// looks with stat(2) only and never opens the path: open(2) of a FIFO for reading blocks until a
// writer appears, so a FIFO in place of a manifest or a `latest` pointer would hang the job.

#include <string>

namespace hpctrain::runtime {

/// Whose file a path is; decides the typed error (and so the exit code) when it is not a regular
/// file: ConfigError (2, a config, model file or run-directory file), DataError (3),
/// CheckpointError (4).
enum class FileKind { kConfig, kData, kCheckpoint };

/// What stat(2) finds at a path (symbolic links followed).
enum class PathType {
  kMissing,
  kRegular,
  kDirectory,
  kFifo,
  kCharDevice,
  kBlockDevice,
  kSocket,
  kOther
};

/// The type of `path`, from stat(2); never opens it. kMissing when stat fails. Local.
PathType path_type(const std::string& path);

/// "a FIFO", "a directory", "missing", ...: for messages. Local.
const char* path_type_name(PathType type);

/// Returns normally when `path` is a regular file. Otherwise throws the error of `kind`:
/// "<what> '<path>' is not a regular file (a FIFO): <fix>", or "... does not exist: <fix>" (`fix`
/// says what to do; may be empty). Never opens the path. Local.
void require_regular_file(const std::string& path, FileKind kind, const std::string& what,
                          const std::string& fix);

/// Like require_regular_file, but a missing path is fine (returns false; true when the path is a
/// regular file): for files a run may not have yet. Local.
bool require_regular_file_if_present(const std::string& path, FileKind kind,
                                     const std::string& what, const std::string& fix);

/// Returns normally when `path` is a directory this process may list and enter. Otherwise throws
/// the error of `kind`: "... does not exist", "... is not a directory (a FIFO)" or "... cannot be
/// read (Permission denied)", each followed by `fix` (may be empty). Never opens the path, so a
/// FIFO cannot block, and no std::filesystem call on it throws a bare filesystem error. Local.
void require_readable_directory(const std::string& path, FileKind kind, const std::string& what,
                                const std::string& fix);

}  // namespace hpctrain::runtime
