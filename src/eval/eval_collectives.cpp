#include "eval_collectives.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "hpctrain/runtime/mpi_check.hpp"

namespace hpctrain::eval::detail {
namespace {

// Sleeps from 50 us up to 20 ms between tests: a decision is noticed within ~20 ms, and an idle
// rank wakes ~50 times a second instead of spinning.
void wait_polite(MPI_Request* request) {
  long delay_us = 50;
  for (;;) {
    int done = 0;
    HPCTRAIN_MPI_CHECK(MPI_Test(request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    delay_us = std::min<long>(delay_us * 2, 20000);
  }
}

}  // namespace

std::string broadcast_text(MPI_Comm comm, const std::string& text) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  MPI_Request request;
  HPCTRAIN_MPI_CHECK(MPI_Ibcast(&length, 1, MPI_INT64_T, 0, comm, &request));
  wait_polite(&request);
  std::string out = text;
  out.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    HPCTRAIN_MPI_CHECK(
        MPI_Ibcast(out.data(), static_cast<int>(length), MPI_CHAR, 0, comm, &request));
    wait_polite(&request);
  }
  return out;
}

void all_reduce_host(comm::Communicator& comm, torch::Tensor& host, comm::ReduceOp op,
                     const torch::Device& device) {
  if (std::string(comm.backend()) != "nccl") {
    comm.all_reduce(host, op);
    return;
  }
  torch::Tensor staged = host.to(device);
  comm.all_reduce(staged, op);
  host.copy_(staged.cpu());
}

}  // namespace hpctrain::eval::detail
