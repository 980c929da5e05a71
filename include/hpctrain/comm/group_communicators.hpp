#pragma once
// One communicator per process-grid group: world, data-parallel, tensor-parallel, pipeline.

#include <memory>
#include <string>

#include "hpctrain/comm/communicator.hpp"

namespace hpctrain::runtime {
class Runtime;
class ProcessGrid;
struct DeviceBinding;
}  // namespace hpctrain::runtime

namespace hpctrain::comm {

struct GroupCommunicators {
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> dp;
  std::shared_ptr<Communicator> tp;
  /// The stages of this rank's pipeline (size 1 when pp = 1): activations and their gradients,
  /// point to point.
  std::shared_ptr<Communicator> pp;
  std::string backend;  ///< "mpi" or "nccl"
};

/// Builds the four communicators with `backend` ("auto": NCCL for CUDA devices when built with
/// it, else MPI; "mpi"; "nccl"). Collective over the world. Throws ConfigError for a backend the
/// device cannot use.
GroupCommunicators make_group_communicators(const runtime::Runtime& runtime,
                                            const runtime::ProcessGrid& grid,
                                            const runtime::DeviceBinding& device,
                                            const std::string& backend = "auto");

}  // namespace hpctrain::comm
