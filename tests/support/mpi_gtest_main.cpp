// The one GoogleTest main for multi-rank tests. Every rank runs every test; rank 0 prints the
// usual report, other ranks print only their failures (prefixed with the rank), and the process
// exit code is the worst over all ranks, so a failure on any rank fails the test everywhere.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/watchdog.hpp"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int world_rank) : world_rank_(world_rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", world_rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
    std::fflush(stderr);
  }

 private:
  int world_rank_;
};

}  // namespace

int main(int argc, char** argv) {
  hpctrain::runtime::tune_malloc();
  ::testing::InitGoogleTest(&argc, argv);
  int code = 1;
  {
    hpctrain::runtime::Runtime runtime(&argc, &argv);
    hpctrain::log::configure(runtime.world_rank(), runtime.host(), hpctrain::log::Level::kWarn,
                             false);
    // A test that leaves one rank waiting in a collective aborts the job instead of hanging CI.
    hpctrain::runtime::Watchdog::start(90);
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    if (runtime.world_rank() != 0) {
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new RankFailurePrinter(runtime.world_rank()));
    }
    int local = RUN_ALL_TESTS();
    MPI_Allreduce(&local, &code, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  return code;
}
