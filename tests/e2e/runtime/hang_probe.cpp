// Test helper: rank 0 enters a barrier that the other ranks never join. The collective watchdog
// must report it (rank, operation, group, time waited) and abort the whole job with kExitHang.

#include <chrono>
#include <thread>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/watchdog.hpp"

int main(int argc, char** argv) {
  hpctrain::runtime::Runtime rt(&argc, &argv);
  hpctrain::runtime::Watchdog::start(2.0);
  hpctrain::comm::MpiCommunicator world(MPI_COMM_WORLD, "world", true);
  if (rt.world_rank() == 0) {
    world.barrier();
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  return 0;
}
