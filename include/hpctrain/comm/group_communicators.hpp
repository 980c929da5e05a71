#pragma once
// One communicator per process-grid group: world, data-parallel, tensor-parallel, pipeline.

#include <mpi.h>

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
/// The groups of hybrid sharding (parallel.shard_group, docs/MEMORY.md): the dp group cut into
/// shard groups (the state divided among their ranks) and replica groups (the ranks holding the
/// same chunks in each shard group). Without hybrid sharding `shard` is the dp group and
/// `replica` null.
struct ShardGroups {
  std::shared_ptr<Communicator> shard;
  std::shared_ptr<Communicator> replica;
  std::shared_ptr<class ControlPlane> shard_control;
};

/// Builds the shard and replica groups of the dp group `groups.dp` (its MPI communicator `dp`):
/// `shard_group` 0 (the whole dp group: no new communicators), -1 (the dp ranks of one node) or
/// N (N consecutive dp ranks). Throws ConfigError naming parallel.shard_group when the groups do
/// not divide the dp group evenly (every rank finds the same). Collective over the dp group.
ShardGroups make_shard_groups(const runtime::Runtime& runtime, MPI_Comm dp,
                              const GroupCommunicators& groups,
                              std::shared_ptr<class ControlPlane> dp_control,
                              const runtime::DeviceBinding& device, int shard_group);

GroupCommunicators make_group_communicators(const runtime::Runtime& runtime,
                                            const runtime::ProcessGrid& grid,
                                            const runtime::DeviceBinding& device,
                                            const std::string& backend = "auto");

}  // namespace hpctrain::comm
