// The four tensor-parallel region operations: forward values and gradients against what the
// collective they stand for must produce, computed locally from every rank's seeded inputs.

#include "hpctrain/parallel/tensor_parallel_ops.hpp"

#include "tp_test_util.hpp"

namespace hpctrain::parallel {
namespace {

using testing::expect_close;
using testing::make_group;
using testing::seeded_randn;
using testing::tp_sizes;

constexpr double kOpsTol = 1e-12;

TEST(TensorParallelOps, CopyToRegionIsIdentityForwardAndAllReduceBackward) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    auto x = seeded_randn({4, 6}, 1).requires_grad_();
    auto y = copy_to_tp_region(x, g.tp);
    expect_close(y, x, 0, "copy forward");
    // Each rank sends back a different gradient; the input gradient is their sum.
    (y * seeded_randn({4, 6}, 100 + r)).sum().backward();
    auto want = torch::zeros({4, 6}, torch::kDouble);
    for (int i = 0; i < tp; ++i) want += seeded_randn({4, 6}, 100 + i);
    expect_close(x.grad(), want, kOpsTol, "copy backward, tp=" + std::to_string(tp));
  }
}

TEST(TensorParallelOps, ReduceFromRegionIsAllReduceForwardAndIdentityBackward) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    auto x = seeded_randn({3, 5}, 200 + r).requires_grad_();
    auto y = reduce_from_tp_region(x * 1.0, g.tp);  // a fresh intermediate, reduced in place
    auto want = torch::zeros({3, 5}, torch::kDouble);
    for (int i = 0; i < tp; ++i) want += seeded_randn({3, 5}, 200 + i);
    expect_close(y, want, kOpsTol, "reduce forward, tp=" + std::to_string(tp));
    auto upstream = seeded_randn({3, 5}, 7);
    (y * upstream).sum().backward();
    expect_close(x.grad(), upstream, 0, "reduce backward");
  }
}

TEST(TensorParallelOps, GatherFromRegionConcatenatesLastDimAndSplitsBackward) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    for (auto shape : std::vector<std::vector<std::int64_t>>{{4, 3}, {2, 5, 3}}) {
      auto x = seeded_randn(shape, 300 + r).requires_grad_();
      auto y = gather_from_tp_region(x, g.tp);
      std::vector<torch::Tensor> parts;
      for (int i = 0; i < tp; ++i) parts.push_back(seeded_randn(shape, 300 + i));
      expect_close(y, torch::cat(parts, -1), 0, "gather forward, tp=" + std::to_string(tp));
      auto upstream = seeded_randn(y.sizes().vec(), 8);
      (y * upstream).sum().backward();
      expect_close(x.grad(), upstream.narrow(-1, r * 3, 3), 0, "gather backward");
    }
  }
}

TEST(TensorParallelOps, ScatterToRegionSplitsForwardAndGathersBackward) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    auto x = seeded_randn({2, 4, 3 * tp}, 9).requires_grad_();
    auto y = scatter_to_tp_region(x, g.tp);
    expect_close(y, x.narrow(-1, r * 3, 3), 0, "scatter forward, tp=" + std::to_string(tp));
    (y * seeded_randn({2, 4, 3}, 400 + r)).sum().backward();
    std::vector<torch::Tensor> parts;
    for (int i = 0; i < tp; ++i) parts.push_back(seeded_randn({2, 4, 3}, 400 + i));
    expect_close(x.grad(), torch::cat(parts, -1), 0, "scatter backward");
  }
}

TEST(TensorParallelOps, AverageGradientsAveragesOverTheGroup) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    auto a = torch::zeros({3}, torch::kDouble).requires_grad_();
    auto b = torch::zeros({2, 2}, torch::kDouble).requires_grad_();
    auto no_grad = torch::zeros({2}, torch::kDouble).requires_grad_();
    a.mutable_grad() = seeded_randn({3}, 500 + r);
    b.mutable_grad() = seeded_randn({2, 2}, 600 + r);
    average_gradients({a, no_grad, b}, *g.tp);
    auto want_a = torch::zeros({3}, torch::kDouble);
    auto want_b = torch::zeros({2, 2}, torch::kDouble);
    for (int i = 0; i < tp; ++i) {
      want_a += seeded_randn({3}, 500 + i) / tp;
      want_b += seeded_randn({2, 2}, 600 + i) / tp;
    }
    expect_close(a.grad(), want_a, kOpsTol, "a");
    expect_close(b.grad(), want_b, kOpsTol, "b");
    EXPECT_FALSE(no_grad.grad().defined());
  }
}

TEST(TensorParallelOps, NullGroupIsIdentityWithoutGraphNodes) {
  auto x = seeded_randn({2, 3}, 1).requires_grad_();
  EXPECT_TRUE(copy_to_tp_region(x, nullptr).is_same(x));
  EXPECT_TRUE(gather_from_tp_region(x, nullptr).is_same(x));
  EXPECT_TRUE(scatter_to_tp_region(x, nullptr).is_same(x));
  auto y = x * 2;
  EXPECT_TRUE(reduce_from_tp_region(y, nullptr).is_same(y));
}

}  // namespace
}  // namespace hpctrain::parallel
