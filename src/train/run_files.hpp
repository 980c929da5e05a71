#pragma once
// The trainer's files in the run directory (config.yaml, ledger.json, the completion marker):
// creating run.dir with a message that names it and the cause when it cannot be, and writing a
// file so that a failure is reported instead of passing silently. Private to the train layer.

#include <string>

namespace hpctrain::train {

/// Creates `dir` (run.dir) and its parents, and checks that it is a writable directory. Throws
/// ConfigError "run.dir = <dir> cannot be used: <cause>: <what to do>" for a read-only file
/// system, missing permission, a file in the way or a name too long. Local.
void create_run_dir(const std::string& dir);

/// Writes `content` to `path` through a temporary file renamed over it. Returns an empty string,
/// or what failed (the path and errno's text). Local.
std::string write_run_file(const std::string& path, const std::string& content);

}  // namespace hpctrain::train
