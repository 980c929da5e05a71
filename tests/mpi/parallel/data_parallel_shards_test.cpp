// The sharded optimizer's parameter gather (parallel::DataParallelShards) as it runs on into the
// next forward: wait_parameter() returns only once the buckets holding that parameter are
// gathered, wait_parameters() once all are, and a tensor outside the flat buffer waits for all.
// Rank 0 starts its gather late, so on the other ranks the gather is still in flight when they
// wait: a wait that returned early would leave the other ranks' chunks unfilled.

#include "hpctrain/parallel/data_parallel_shards.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <limits>
#include <thread>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"

namespace hpctrain::parallel {
namespace {

struct Layers : torch::nn::Module {
  Layers() {
    for (int i = 0; i < 4; ++i) {
      linears.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(6, 5)));
    }
  }
  std::vector<torch::nn::Linear> linears;
};

// The value every rank should end with at flat position i.
torch::Tensor expected_values(std::int64_t numel) {
  return torch::arange(numel, torch::kFloat).mul_(0.5).add_(1);
}

TEST(DataParallelShards, WaitsForTheBucketsOfEachParameterWhileTheGatherRuns) {
  auto dp = std::make_shared<comm::MpiCommunicator>(MPI_COMM_WORLD, "dp", /*async_thread=*/true);
  const int size = dp->size();
  const std::int64_t bucket_bytes = 128;  // about a bucket per layer (35 parameters each)
  Layers layers;
  FlatParameters flat(layers, FlatLayout{bucket_bytes, size, {}});
  GradientSynchronizer sync(flat, dp, bucket_bytes, /*overlap=*/true, /*reduce_scatter=*/true);
  ASSERT_GE(sync.bucket_sizes().size(), 3u);
  DataParallelShards shards(flat, sync.bucket_offsets(), sync.bucket_sizes(), dp);

  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // This rank's chunks hold their final values; the rest is NaN until gathered.
    const torch::Tensor want = expected_values(flat.numel());
    {
      torch::NoGradGuard no_grad;
      flat.params().fill_(std::numeric_limits<float>::quiet_NaN());
      for (const auto& r : shards.owned()) {
        flat.params().narrow(0, r.offset, r.numel).copy_(want.narrow(0, r.offset, r.numel));
      }
    }
    if (dp->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    shards.start_parameter_gather();
    EXPECT_EQ(shards.gather_pending(), size > 1);
    auto check = [&](const torch::Tensor& p, const char* what) {
      const auto& entries = flat.entries();
      for (const auto& e : entries) {
        if (!e.param.is_same(p)) continue;
        EXPECT_TRUE(torch::equal(e.param.detach().flatten(), want.narrow(0, e.offset, e.numel)))
            << what << " " << e.name << " on rank " << dp->rank();
        return;
      }
      ADD_FAILURE() << "no flat entry for " << what;
    };
    if (round == 0) {
      // Forward's order: the first layer first, one parameter at a time.
      for (auto& linear : layers.linears) {
        shards.wait_parameter(linear->weight);
        check(linear->weight, "weight");
        shards.wait_parameter(linear->bias);
        check(linear->bias, "bias");
      }
      EXPECT_FALSE(shards.gather_pending());
    } else {
      // A tensor that is not a view into the flat parameters waits for everything.
      shards.wait_parameter(torch::zeros({3}));
      EXPECT_FALSE(shards.gather_pending());
    }
    EXPECT_EQ(shards.wait_parameters(), 0.0);  // nothing left in flight
    EXPECT_TRUE(torch::equal(flat.params(), want)) << "rank " << dp->rank();
  }
}

}  // namespace
}  // namespace hpctrain::parallel
