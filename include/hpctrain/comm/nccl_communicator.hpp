#pragma once
// NCCL backend for CUDA tensors. The ncclUniqueId is created on the group's rank 0 and broadcast
// over the group's MPI communicator. Collectives run on the communicator's own CUDA stream,
// ordered after the work already queued on the default stream, and the default stream is then
// ordered after them, so callers see stream semantics like LibTorch's own collectives.
// Compiled whenever NCCL is found (HPCTRAIN_HAVE_NCCL), even on machines without a GPU.

#include <mpi.h>

#include <memory>
#include <string>

#include "hpctrain/comm/communicator.hpp"

namespace hpctrain::comm {

/// Whether this build has the NCCL backend. Local.
bool nccl_compiled();
/// Whether a CUDA device is usable by the CUDA runtime here (false on machines without a GPU,
/// where cudaGetDeviceCount reports "driver insufficient"). Local.
bool cuda_runtime_has_device();
/// NCCL version as "2.28.9", or "not built" / "unavailable". Local.
std::string nccl_version();

/// Creates an NCCL communicator over the ranks of `comm` on CUDA device `cuda_index`.
/// Collective over `comm`. Throws CommError when NCCL is not built or no GPU is present.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     int cuda_index);

}  // namespace hpctrain::comm
