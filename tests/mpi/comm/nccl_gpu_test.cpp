// NCCL communicator on real GPUs (label gpu). Skips, saying why, where no GPU or no NCCL exists.

#include <gtest/gtest.h>

#include "hpctrain/comm/nccl_communicator.hpp"
#include "hpctrain/runtime/device.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::comm {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!nccl_compiled())
      GTEST_SKIP() << "built without NCCL (HPCTRAIN_WITH_NCCL=OFF or not found)";
    if (!cuda_runtime_has_device()) GTEST_SKIP() << "no CUDA device visible to the CUDA runtime";
    if (!runtime::cuda_available()) {
      GTEST_SKIP() << "LibTorch has no CUDA support (CPU build); build against a CUDA LibTorch";
    }
    // NCCL needs one GPU per rank: two ranks of a node on one GPU fail with "Duplicate GPU
    // detected". Every rank of a node sees the same counts, so all skip together.
    const int local = runtime::Runtime::current()->local_size();
    const int gpus = static_cast<int>(torch::cuda::device_count());
    if (local > gpus) {
      GTEST_SKIP() << local << " ranks on this node but " << gpus
                   << " GPU(s): NCCL needs a GPU per rank; run with at most " << gpus
                   << " rank(s) per node";
    }
  }
};

TEST_F(NcclTest, CollectivesMatchWorldSizeFormulas) {
  const auto& rt = *runtime::Runtime::current();
  const int device = rt.local_rank() % static_cast<int>(torch::cuda::device_count());
  auto comm = make_nccl_communicator(MPI_COMM_WORLD, "world", device);
  const int n = comm->size();
  auto opts = torch::TensorOptions().device(torch::kCUDA, device);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    auto t = torch::full({1024}, rt.world_rank() + 1, opts.dtype(dtype));
    comm->all_reduce(t, ReduceOp::kSum);
    EXPECT_TRUE(torch::equal(
        t.cpu(), torch::full({1024}, n * (n + 1) / 2, torch::TensorOptions().dtype(dtype))));
    auto m = torch::full({5}, rt.world_rank(), opts.dtype(dtype));
    comm->all_reduce(m, ReduceOp::kMax);
    EXPECT_EQ(m.cpu().to(torch::kDouble)[0].item<double>(), n - 1);
  }
  auto async = torch::ones({4096}, opts);
  comm->all_reduce_async(async, ReduceOp::kAvg)->wait();
  EXPECT_TRUE(torch::allclose(async.cpu(), torch::ones({4096})));
  auto b = torch::full({3}, static_cast<float>(rt.world_rank()), opts);
  comm->broadcast(b, n - 1);
  EXPECT_TRUE(torch::equal(b.cpu(), torch::full({3}, static_cast<float>(n - 1))));
  auto g = comm->all_gather(torch::full({2}, static_cast<float>(rt.world_rank()), opts)).cpu();
  for (int r = 0; r < n; ++r) EXPECT_EQ(g[2 * r].item<float>(), r);
  auto rs = comm->reduce_scatter(torch::ones({2 * n}, opts), ReduceOp::kSum).cpu();
  EXPECT_TRUE(torch::equal(rs, torch::full({2}, static_cast<float>(n))));
  // In place: chunk r of the buffer after the reduce-scatter, every chunk after the all-gather.
  const int me = rt.world_rank();
  auto in_place = torch::full({3 * n}, static_cast<float>(me + 1), opts);
  comm->reduce_scatter_in_place_async(in_place, ReduceOp::kSum)->wait();
  EXPECT_TRUE(
      torch::equal(in_place.narrow(0, 3 * me, 3).cpu(), torch::full({3}, n * (n + 1) / 2.0f)));
  auto gather = torch::full({2 * n}, -1.0f, opts);
  gather.narrow(0, 2 * me, 2).fill_(static_cast<float>(me));
  comm->all_gather_in_place_async(gather)->wait();
  auto host = gather.cpu();
  for (int r = 0; r < n; ++r) EXPECT_EQ(host[2 * r + 1].item<float>(), r);
  comm->barrier();
}

}  // namespace
}  // namespace hpctrain::comm
