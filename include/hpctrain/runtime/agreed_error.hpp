#pragma once
// An error that every rank of the world raises identically, after the ranks agreed on it (a
// checkpoint save failure that world rank 0 broadcast): printing it on every rank would repeat
// one message world-size times.

#include <string>

#include "hpctrain/runtime/error.hpp"

namespace hpctrain {

/// Raised on every rank at once with the same message and code. main() prints it on world rank 0
/// only and every rank ends with the code, without MPI_Abort (no rank is left waiting: every
/// rank stops).
class AgreedError : public Error {
 public:
  AgreedError(const std::string& message, int exit_code) : Error(message, exit_code) {}
};

}  // namespace hpctrain
