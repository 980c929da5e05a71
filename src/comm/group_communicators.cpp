#include "hpctrain/comm/group_communicators.hpp"

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

}  // namespace hpctrain::comm
