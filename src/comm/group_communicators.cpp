#include "hpctrain/comm/group_communicators.hpp"

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/comm/nccl_communicator.hpp"
#include "hpctrain/runtime/device.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::comm {

GroupCommunicators make_group_communicators(const runtime::Runtime& runtime,
                                            const runtime::ProcessGrid& grid,
                                            const runtime::DeviceBinding& device,
                                            const std::string& backend) {
  std::string chosen = backend;
  const bool on_gpu = device.cuda_index >= 0;
  if (chosen == "auto") chosen = (on_gpu && nccl_compiled()) ? "nccl" : "mpi";
  if (chosen != "mpi" && chosen != "nccl") {
    throw ConfigError(
        str("communicator backend '", backend, "' is unknown: use auto, mpi or nccl"));
  }
  if (chosen == "nccl" && !on_gpu) {
    throw ConfigError(
        "communicator backend 'nccl' needs a CUDA device, and this rank runs on the "
        "CPU; use --comm-backend mpi (or auto)");
  }
  GroupCommunicators groups;
  groups.backend = chosen;
  if (chosen == "nccl") {
    groups.world = make_nccl_communicator(grid.world_comm(), "world", device.cuda_index);
    groups.dp = make_nccl_communicator(grid.dp_comm(), "dp", device.cuda_index);
    groups.tp = make_nccl_communicator(grid.tp_comm(), "tp", device.cuda_index);
    groups.pp = make_nccl_communicator(grid.pp_comm(), "pp", device.cuda_index);
  } else {
    // The communication thread overlaps all-reduce with backward; it needs MPI_THREAD_MULTIPLE
    // because the main thread keeps calling MPI on other groups meanwhile.
    const bool async_thread = runtime.thread_multiple();
    groups.world = std::make_shared<MpiCommunicator>(grid.world_comm(), "world", async_thread);
    groups.dp = std::make_shared<MpiCommunicator>(grid.dp_comm(), "dp", async_thread);
    groups.tp = std::make_shared<MpiCommunicator>(grid.tp_comm(), "tp", async_thread);
    groups.pp = std::make_shared<MpiCommunicator>(grid.pp_comm(), "pp", async_thread);
  }
  return groups;
}

namespace {

// A communicator (or control channel) over an MPI communicator it owns: the MPI communicator is
// freed after the object over it.
template <typename T>
struct Owned {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<T> object;
  ~Owned() {
    object.reset();
    if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
  }
};

template <typename T>
std::shared_ptr<T> own(MPI_Comm comm, std::unique_ptr<T> object) {
  auto holder = std::make_shared<Owned<T>>();
  holder->comm = comm;
  holder->object = std::move(object);
  return std::shared_ptr<T>(holder, holder->object.get());
}

std::shared_ptr<Communicator> data_plane(const runtime::Runtime& runtime, MPI_Comm comm,
                                         const std::string& name, const std::string& backend,
                                         const runtime::DeviceBinding& device) {
  MPI_Comm mine = MPI_COMM_NULL;
  MPI_Comm_dup(comm, &mine);
  if (backend == "nccl") return own(mine, make_nccl_communicator(mine, name, device.cuda_index));
  return own<Communicator>(
      mine, std::make_unique<MpiCommunicator>(mine, name, runtime.thread_multiple()));
}

}  // namespace

ShardGroups make_shard_groups(const runtime::Runtime& runtime, MPI_Comm dp,
                              const GroupCommunicators& groups,
                              std::shared_ptr<ControlPlane> dp_control,
                              const runtime::DeviceBinding& device, int shard_group) {
  ShardGroups out{groups.dp, nullptr, std::move(dp_control)};
  const int size = groups.dp->size();
  const int rank = groups.dp->rank();
  if (shard_group == 0 || shard_group == size) return out;
  MPI_Comm shard = MPI_COMM_NULL;
  if (shard_group < 0) {
    MPI_Comm_split_type(dp, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shard);
  } else {
    if (size % shard_group != 0) {
      throw ConfigError(str("parallel.shard_group = ", shard_group, " does not divide the ", size,
                            " ranks of the data-parallel group: give a divisor of ", size,
                            ", node or dp"));
    }
    MPI_Comm_split(dp, rank / shard_group, rank, &shard);
  }
  int shard_size = 0;
  int shard_rank = 0;
  MPI_Comm_size(shard, &shard_size);
  MPI_Comm_rank(shard, &shard_rank);
  int sizes[2] = {shard_size, -shard_size};
  MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, dp);
  if (sizes[0] != -sizes[1]) {
    MPI_Comm_free(&shard);
    throw ConfigError(str(
        "parallel.shard_group = node: the nodes hold different numbers of the "
        "data-parallel group's ranks (",
        -sizes[1], " to ", sizes[0], "); give a number of ranks that divides the group, or dp"));
  }
  MPI_Comm replica = MPI_COMM_NULL;
  MPI_Comm_split(dp, shard_rank, rank, &replica);
  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm_dup(shard, &control);
  out.shard = data_plane(runtime, shard, "shard", groups.backend, device);
  out.replica = data_plane(runtime, replica, "replica", groups.backend, device);
  out.shard_control = own(control, std::make_unique<ControlPlane>(control, "shard"));
  MPI_Comm_free(&shard);
  MPI_Comm_free(&replica);
  return out;
}

}  // namespace hpctrain::comm
