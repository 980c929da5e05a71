// The kernels a GPU step takes that the CPU does not (issue 43): the per-token loss through
// LibTorch's cross entropy at tp = 1 on a device, and the gradient's square sum without a float64
// copy. The dispatch is pinned here, and each GPU kernel is run on the CPU against the function
// the CPU keeps using (vocab_parallel_cross_entropy at tp = 1, square_sum): the same values up to
// float rounding, the same predictions, the same gradients.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::parallel {
namespace {

TEST(CrossEntropyKernel, Dispatch) {
  using K = CrossEntropyKernel;
  EXPECT_EQ(choose_cross_entropy(1, c10::DeviceType::CUDA), K::kLibTorch);
  EXPECT_EQ(choose_cross_entropy(2, c10::DeviceType::CUDA), K::kVocabParallel);
  EXPECT_EQ(choose_cross_entropy(8, c10::DeviceType::CUDA), K::kVocabParallel);
  // The CPU keeps the vocab-parallel function at every tp: its results stay bitwise as before.
  EXPECT_EQ(choose_cross_entropy(1, c10::DeviceType::CPU), K::kVocabParallel);
  EXPECT_EQ(choose_cross_entropy(2, c10::DeviceType::CPU), K::kVocabParallel);
}

// Loss, predictions and the logits' gradient of both kernels on the same logits.
struct Result {
  torch::Tensor loss;
  torch::Tensor predictions;
  torch::Tensor grad;
};
Result run(bool libtorch, const torch::Tensor& logits_in, const torch::Tensor& targets) {
  torch::Tensor logits = logits_in.detach().clone().requires_grad_(true);
  Result r;
  r.loss = libtorch ? libtorch_cross_entropy(logits, targets, &r.predictions)
                    : vocab_parallel_cross_entropy(logits, targets, nullptr, logits.size(-1),
                                                   &r.predictions);
  // A weighted sum, so that each token's gradient is scaled differently.
  torch::Tensor weights = torch::arange(1, targets.numel() + 1, torch::kDouble)
                              .view(targets.sizes())
                              .to(r.loss.scalar_type());
  (r.loss * weights).sum().backward();
  r.grad = logits.grad();
  return r;
}

TEST(CrossEntropyKernel, LibTorchMatchesVocabParallelAtTp1) {
  torch::manual_seed(7);
  const std::int64_t batch = 3, seq = 5, vocab = 37;
  torch::Tensor targets = torch::randint(0, vocab, {batch, seq}, torch::kLong);
  for (auto dtype : {torch::kFloat, torch::kDouble, torch::kBFloat16}) {
    torch::Tensor logits = (torch::randn({batch, seq, vocab}, torch::kDouble) * 3).to(dtype);
    logits[1][2][targets[1][2].item<std::int64_t>()] = 40;  // a confident, right token
    logits[0][0].fill_(0.5);                                // ties everywhere: lowest id wins
    const Result want = run(false, logits, targets);
    const Result got = run(true, logits, targets);
    const double tol = dtype == torch::kDouble ? 1e-12 : 1e-5;
    EXPECT_EQ(got.loss.scalar_type(), want.loss.scalar_type()) << dtype;
    EXPECT_EQ(got.loss.sizes(), want.loss.sizes());
    EXPECT_TRUE(
        torch::allclose(got.loss.to(torch::kDouble), want.loss.to(torch::kDouble), tol, tol))
        << dtype << "\n"
        << (got.loss - want.loss).abs().max();
    EXPECT_TRUE(torch::equal(got.predictions, want.predictions)) << dtype;
    EXPECT_EQ(got.predictions[0][0].item<std::int64_t>(), 0);
    EXPECT_EQ(got.grad.scalar_type(), dtype);
    const double grad_tol = dtype == torch::kBFloat16 ? 2e-2 : tol;
    EXPECT_TRUE(torch::allclose(got.grad.to(torch::kDouble), want.grad.to(torch::kDouble), grad_tol,
                                grad_tol))
        << dtype << "\n"
        << (got.grad.to(torch::kDouble) - want.grad.to(torch::kDouble)).abs().max();
  }
}

TEST(CrossEntropyKernel, TokenCrossEntropyOnTheCpuIsTheVocabParallelFunction) {
  torch::manual_seed(3);
  torch::Tensor logits = torch::randn({2, 4, 11});
  torch::Tensor targets = torch::randint(0, 11, {2, 4}, torch::kLong);
  torch::Tensor p1, p2;
  const torch::Tensor a = token_cross_entropy(logits, targets, nullptr, 11, &p1);
  const torch::Tensor b = vocab_parallel_cross_entropy(logits, targets, nullptr, 11, &p2);
  EXPECT_TRUE(torch::equal(a, b));  // bitwise: the same function
  EXPECT_TRUE(torch::equal(p1, p2));
  EXPECT_THROW(libtorch_cross_entropy(logits, targets.narrow(1, 0, 3)), Error);
}

// The device path of the gradient norm, run on the CPU against a float64 reference: rows of
// 64 Ki elements, a ragged rest, empty tensors, and a bfloat16 gradient.
TEST(SquareSumByRows, MatchesAFloat64Sum) {
  torch::manual_seed(11);
  for (std::int64_t n : {0L, 1L, 1000L, 65536L, 65537L, 3 * 65536L + 123}) {
    for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
      const torch::Tensor g = torch::randn({n}, torch::kDouble).to(dtype);
      const double want = g.to(torch::kDouble).pow(2).sum().item<double>();
      const double got = square_sum_by_rows(g);
      // Within a row the squares add up in float32 (LibTorch's order, not a pairwise sum), so a
      // row of 64 Ki elements keeps about five digits; float64 rows keep twelve.
      const double rel = dtype == torch::kDouble ? 1e-12 : 2e-5;
      EXPECT_NEAR(got, want, rel * std::max(1.0, want)) << "n " << n << ", " << dtype;
    }
  }
  // Any shape: a [rows, cols] gradient is read as the flat sequence of its elements.
  const torch::Tensor m = torch::randn({300, 500});
  EXPECT_NEAR(square_sum_by_rows(m), square_sum(m.reshape({-1})),
              1e-6 * square_sum(m.reshape({-1})));
}

}  // namespace
}  // namespace hpctrain::parallel
