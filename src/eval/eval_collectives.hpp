#pragma once
// Private to the eval layer. World rank 0 decides (lists checkpoints, verifies, checks results),
// then every rank learns the decision as text. The waiting ranks poll a non-blocking broadcast
// with short sleeps instead of blocking in MPI: OpenMPI's blocking broadcast spins on a core, and
// a watcher idles for minutes between checkpoints next to the training job it watches.

#include <mpi.h>
#include <torch/torch.h>

#include <string>

#include "hpctrain/comm/communicator.hpp"

namespace hpctrain::eval::detail {

/// `text` of world rank 0 on every rank of `comm`, waiting politely (no collective watchdog: a
/// watcher may legitimately wait a whole poll interval here). Collective over `comm`.
std::string broadcast_text(MPI_Comm comm, const std::string& text);

/// All-reduces a CPU tensor over `comm` in place. The NCCL backend takes CUDA tensors only, so
/// there the values travel through `device` and back. Collective over `comm`.
void all_reduce_host(comm::Communicator& comm, torch::Tensor& host, comm::ReduceOp op,
                     const torch::Device& device);

}  // namespace hpctrain::eval::detail
