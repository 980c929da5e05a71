// Test helper: rank 0 enters a barrier that the other ranks never join (or, with the argument
// "recv", waits for a message from rank 1 on a "pp" group that rank 1 never sends; with
// "host_sync", queues a reduction that rank 1 never reaches and then reads its result on the host,
// as a GPU rank reads the gradient norm). The collective watchdog must report it (rank,
// operation, group, the peer, time waited) and abort the whole job with kExitHang.

#include <chrono>
#include <string>
#include <thread>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/watchdog.hpp"

int main(int argc, char** argv) {
  hpctrain::runtime::Runtime rt(&argc, &argv);
  hpctrain::runtime::Watchdog::start(2.0);
  hpctrain::comm::MpiCommunicator world(MPI_COMM_WORLD, "world", true);
  hpctrain::comm::MpiCommunicator pp(MPI_COMM_WORLD, "pp", true);
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool recv = mode == "recv";
  if (rt.world_rank() == 0) {
    if (mode == "host_sync") {
      // As the NCCL communicator does on a GPU: the reduction is numbered on the data-plane
      // channel and queued (a non-blocking MPI_Iallreduce here, a kernel on the communication
      // stream there); the host goes on, and blocks only where it reads a value computed after
      // it. That read is watched as a host sync (HostSyncScope, which comm::host_value uses).
      hpctrain::runtime::Channel* dp = hpctrain::runtime::channel("dp", "", MPI_COMM_WORLD);
      const auto issued = hpctrain::runtime::issue_op(dp, "all_reduce", "dp", sizeof(double));
      dp->enter(issued.seq, "all_reduce");
      double local = 1.0, sum = 0.0;
      MPI_Request request;
      MPI_Iallreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &request);
      hpctrain::runtime::HostSyncScope sync("gradient norm");
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    } else if (recv) {
      auto in = torch::zeros({4});
      pp.recv(in, 1);
    } else {
      world.barrier();
    }
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  return 0;
}
