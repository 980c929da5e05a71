#pragma once
// Errors that every rank of the world raises identically, after the ranks agreed on them (a
// checkpoint save failure that world rank 0 broadcast): printing one on every rank would repeat
// one message world-size times.

#include <string>

#include "hpctrain/runtime/error.hpp"

namespace hpctrain {

/// Marks an error raised on every rank at once with the same message and code. main() prints it
/// on world rank 0 only and every rank ends with the code, without MPI_Abort (no rank is left
/// waiting: every rank stops).
class Agreed {
 public:
  virtual ~Agreed() = default;
};

/// A CheckpointError (exit 4) that every rank raised at once. Local to throw; see Agreed.
class AgreedCheckpointError : public CheckpointError, public Agreed {
 public:
  explicit AgreedCheckpointError(const std::string& message) : CheckpointError(message) {}
};

/// A DataError (exit 3) that every rank raised at once (a data file that one rank validated for
/// all). Local to throw; see Agreed.
class AgreedDataError : public DataError, public Agreed {
 public:
  explicit AgreedDataError(const std::string& message) : DataError(message) {}
};

/// A ConfigError (exit 2) that every rank raised at once from the same config and world (a trace
/// window over its size bound). Local to throw; see Agreed.
class AgreedConfigError : public ConfigError, public Agreed {
 public:
  explicit AgreedConfigError(const std::string& message) : ConfigError(message) {}
};

/// Any other Error (its exit code kept) that every rank raised at once. Local to throw.
class AgreedError : public Error, public Agreed {
 public:
  AgreedError(const std::string& message, int exit_code) : Error(message, exit_code) {}
};

}  // namespace hpctrain
