#include "hpctrain/runtime/mpi_check.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::detail {

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw CommError(str("MPI call failed on ", log::where(), ": ", call, " returned ", code, " (",
                      text, ") at ", file, ":", line,
                      ". Check that every rank runs the same command and that the MPI library "
                      "matches the one hpctrain was built with (hpctrain env)."));
}

}  // namespace hpctrain::detail
