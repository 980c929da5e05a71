#pragma once
// Private to the comm layer: the MPI operator of a ReduceOp, one definition for the control plane
// and the MPI communicator (kAvg is MPI_SUM; the callers divide afterwards).

#include <mpi.h>

#include "hpctrain/comm/reduce_op.hpp"

namespace hpctrain::comm {

/// MPI_SUM, MPI_MAX or MPI_MIN for `op`. Local.
inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

}  // namespace hpctrain::comm
