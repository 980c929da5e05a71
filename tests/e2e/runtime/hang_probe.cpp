// Test helper: rank 0 enters a barrier that the other ranks never join (or, with the argument
// "recv", waits for a message from rank 1 on a "pp" group that rank 1 never sends). The collective
// watchdog must report it (rank, operation, group, the peer, time waited) and abort the whole job
// with kExitHang.

#include <chrono>
#include <string>
#include <thread>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/watchdog.hpp"

int main(int argc, char** argv) {
  hpctrain::runtime::Runtime rt(&argc, &argv);
  hpctrain::runtime::Watchdog::start(2.0);
  hpctrain::comm::MpiCommunicator world(MPI_COMM_WORLD, "world", true);
  hpctrain::comm::MpiCommunicator pp(MPI_COMM_WORLD, "pp", true);
  const bool recv = argc > 1 && std::string(argv[1]) == "recv";
  if (rt.world_rank() == 0) {
    if (recv) {
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
