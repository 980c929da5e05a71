#pragma once
// Typed errors. Library code throws these; only main() decides how the process ends
// (print one message with rank and host, then MPI_Abort with the error's exit code).

#include <stdexcept>
#include <string>

namespace hpctrain {

/// Process exit codes, documented in README.md ("Exit codes"). Job scripts rely on them.
enum ExitCode : int {
  kExitOk = 0,
  kExitError = 1,       ///< any failure not covered below
  kExitUsage = 2,       ///< bad command line or configuration
  kExitData = 3,        ///< a data file is missing, unreadable or does not fit
  kExitCheckpoint = 4,  ///< a checkpoint is missing, corrupt or does not fit
  kExitComm = 5,        ///< a communicator failed
  kExitNonFinite = 6,   ///< training produced a non-finite loss or gradient
  kExitHang = 7,        ///< a collective exceeded the collective timeout
  kExitRequeue = 75,    ///< stopped on request after saving a checkpoint: requeue me (EX_TEMPFAIL)
};

/// Base of all hpctrain errors; carries the exit code main() ends the job with.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = kExitError)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

/// Bad command line, config key, value or combination (including the process grid shape).
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& m) : Error(m, kExitUsage) {}
};

/// A dataset file that is missing, unreadable, or does not match what the run expects.
class DataError : public Error {
 public:
  explicit DataError(const std::string& m) : Error(m, kExitData) {}
};

/// A checkpoint that is missing, fails verification, or does not fit the model.
class CheckpointError : public Error {
 public:
  explicit CheckpointError(const std::string& m) : Error(m, kExitCheckpoint) {}
};

/// A communicator call that failed (MPI or NCCL error, unsupported dtype or op).
class CommError : public Error {
 public:
  explicit CommError(const std::string& m) : Error(m, kExitComm) {}
};

/// Training produced a non-finite loss or gradient and was not configured to skip it.
class NonFiniteError : public Error {
 public:
  explicit NonFiniteError(const std::string& m) : Error(m, kExitNonFinite) {}
};

}  // namespace hpctrain
