// Vocabulary-parallel cross entropy and top-1 against torch's cross_entropy and argmax on the
// full logits: per-token losses, logit gradients, predictions with ties across and within
// shards, and padded vocabularies whose padding columns hold values larger than any real logit.

#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/runtime/error.hpp"
#include "tp_test_util.hpp"

namespace hpctrain::parallel {
namespace {

using testing::expect_close;
using testing::make_group;
using testing::seeded_ids;
using testing::seeded_randn;
using testing::tp_sizes;

// Full logits [3, 5, vocab] with planted ties: (0, 0) has its maximum at ids 1 and vocab - 1
// (different shards once tp > 1), (0, 1) at ids 2 and 3 (often the same shard), (0, 2) is
// constant (argmax 0).
torch::Tensor full_logits(std::int64_t vocab, torch::ScalarType dtype) {
  auto logits = seeded_randn({3, 5, vocab}, 41, dtype);
  logits[0][0][1] = 9;
  logits[0][0][vocab - 1] = 9;
  logits[0][1][2] = 9;
  logits[0][1][3] = 9;
  logits[0][2].fill_(0.5);
  return logits;
}

// This rank's columns, with the padding filled with a value larger than every real logit: a
// loss or argmax that forgot the mask would pick it.
torch::Tensor local_logits(const torch::Tensor& full, int tp_rank, int tp_size) {
  const std::int64_t vocab = full.size(-1);
  TensorShard s{full.sizes().vec(), 2};
  torch::Tensor local = shard_of(full, s, tp_rank, tp_size);
  const auto [begin, end] = shard_range(vocab, local.size(-1), tp_rank);
  const std::int64_t real = end - begin;
  if (real < local.size(-1)) local.narrow(-1, real, local.size(-1) - real).fill_(50.0);
  return local;
}

TEST(VocabParallelCrossEntropy, MatchesTorchOnFullLogits) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    for (std::int64_t vocab : {16, 13, 10, 5}) {
      for (auto dtype : {torch::kDouble, torch::kFloat}) {
        const double tol = dtype == torch::kDouble ? 1e-12 : 2e-5;
        const std::string what = "tp=" + std::to_string(tp) + " vocab=" + std::to_string(vocab) +
                                 " " + c10::toString(dtype);
        auto full = full_logits(vocab, dtype);
        auto targets = seeded_ids({3, 5}, vocab, 42);
        targets[1][0] = vocab - 1;  // the last real id, next to the padding
        auto logits = local_logits(full, r, tp).requires_grad_();
        auto full_ref = full.clone().requires_grad_();

        torch::Tensor predictions;
        auto loss = vocab_parallel_cross_entropy(logits, targets, g.tp, vocab, &predictions);
        auto loss_ref = torch::nn::functional::cross_entropy(
            full_ref.view({-1, vocab}), targets.view({-1}),
            torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
        ASSERT_EQ(loss.sizes(), targets.sizes()) << what;
        expect_close(loss, loss_ref.view({3, 5}), tol, what + " per-token loss");

        auto want_argmax = full.argmax(-1);
        EXPECT_TRUE(torch::equal(predictions, want_argmax)) << what << "\n"
                                                            << predictions << "\n"
                                                            << want_argmax;
        EXPECT_EQ(want_argmax[0][0].item<std::int64_t>(), 1);
        EXPECT_EQ(want_argmax[0][1].item<std::int64_t>(), 2);
        EXPECT_EQ(want_argmax[0][2].item<std::int64_t>(), 0);
        EXPECT_TRUE(torch::equal(vocab_parallel_argmax(logits, g.tp, vocab), want_argmax)) << what;

        // Weighted per-token losses, so every token's incoming gradient differs.
        auto weights = seeded_randn({3, 5}, 43, dtype);
        (loss * weights).sum().backward();
        (loss_ref.view({3, 5}) * weights).sum().backward();
        ASSERT_EQ(logits.grad().scalar_type(), dtype) << what;
        TensorShard s{full.sizes().vec(), 2};
        expect_close(logits.grad(), shard_of(full_ref.grad(), s, r, tp), tol,
                     what + " logit grad (padding columns zero)");
      }
    }
  }
}

TEST(VocabParallelCrossEntropy, RejectsLogitsThatDoNotMatchTheVocabulary) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    // 17 ids need ceil(17 / tp) columns per rank; give one more.
    const std::int64_t cols = (17 + tp - 1) / tp + 1;
    auto logits = torch::zeros({2, cols});
    auto targets = torch::zeros({2}, torch::kLong);
    EXPECT_THROW(vocab_parallel_cross_entropy(logits, targets, g.tp, 17), Error);
  }
}

}  // namespace
}  // namespace hpctrain::parallel
