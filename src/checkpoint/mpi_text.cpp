#include "mpi_text.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"

namespace hpctrain::checkpoint::mpi {
namespace {

// Sleeps growing from 50 us to 2 ms: a message is noticed within ~2 ms, and an idle wait costs
// a few hundred wake-ups per second instead of a spinning core.
class Backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    delay_us_ = std::min<long>(delay_us_ * 2, 2000);
  }

 private:
  long delay_us_ = 50;
};

void wait_polite(MPI_Request* requests, int count) {
  Backoff backoff;
  for (;;) {
    int done = 0;
    HPCTRAIN_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    backoff.pause();
  }
}

}  // namespace

void send_text(MPI_Comm comm, int dest, int tag, const std::string& text) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  MPI_Request requests[2];
  HPCTRAIN_MPI_CHECK(MPI_Isend(&length, 1, MPI_INT64_T, dest, tag, comm, &requests[0]));
  HPCTRAIN_MPI_CHECK(MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, dest, tag,
                               comm, &requests[1]));
  wait_polite(requests, 2);
}

std::string recv_text(MPI_Comm comm, int source, int tag) {
  std::int64_t length = 0;
  MPI_Request request;
  HPCTRAIN_MPI_CHECK(MPI_Irecv(&length, 1, MPI_INT64_T, source, tag, comm, &request));
  wait_polite(&request, 1);
  std::string text(static_cast<std::size_t>(length), '\0');
  HPCTRAIN_MPI_CHECK(
      MPI_Irecv(text.data(), static_cast<int>(length), MPI_CHAR, source, tag, comm, &request));
  wait_polite(&request, 1);
  return text;
}

std::string bcast_text(MPI_Comm comm, int root, const std::string& text) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  HPCTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, root, comm));
  std::string out = text;
  out.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    HPCTRAIN_MPI_CHECK(MPI_Bcast(out.data(), static_cast<int>(length), MPI_CHAR, root, comm));
  }
  return out;
}

void agree(MPI_Comm comm, const std::string& problem) {
  int rank = 0, size = 1;
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  int first = problem.empty() ? size : rank;
  {
    runtime::Watchdog::Scope watch("allreduce (checkpoint agreement)", "world", sizeof first);
    HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  }
  if (first == size) return;
  std::string message = bcast_text(comm, first, problem);
  if (first != 0) message = str("world rank ", first, ": ", message);
  throw CheckpointError(message);
}

}  // namespace hpctrain::checkpoint::mpi
