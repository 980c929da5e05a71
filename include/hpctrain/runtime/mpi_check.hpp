#pragma once
// HPCTRAIN_MPI_CHECK wraps every MPI call: on failure it throws CommError naming the call,
// file:line, the MPI error string and the rank, so main() can end the job with one message.

#include <mpi.h>

#include <string>

namespace hpctrain::detail {
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);
}  // namespace hpctrain::detail

#define HPCTRAIN_MPI_CHECK(call)                                                        \
  do {                                                                                  \
    int hpctrain_mpi_rc_ = (call);                                                      \
    if (hpctrain_mpi_rc_ != MPI_SUCCESS)                                                \
      ::hpctrain::detail::throw_mpi_error(hpctrain_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)
