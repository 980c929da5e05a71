// ColumnParallelLinear, RowParallelLinear and VocabParallelEmbedding at every tp size against
// the same computation done with plain torch ops on the logical weights (reassembled from the
// shards): forward outputs, input gradients and every weight shard's gradient, in float64.

#include "hpctrain/parallel/tensor_parallel_linear.hpp"
#include "hpctrain/parallel/vocab_parallel_embedding.hpp"
#include "hpctrain/runtime/error.hpp"
#include "tp_test_util.hpp"

namespace hpctrain::parallel {
namespace {

using testing::expect_close;
using testing::make_group;
using testing::seeded_ids;
using testing::seeded_randn;
using testing::tp_sizes;

constexpr double kTol = 1e-12;
constexpr std::uint64_t kSeed = 1234;

// The logical tensor of a layer parameter as a fresh leaf for the reference computation.
torch::Tensor logical_leaf(const torch::Tensor& local, const TensorShard& shard,
                           const CommPtr& tp) {
  return gather_logical(local.detach(), shard, tp).clone().requires_grad_();
}

// Biases start at zero, which would hide a bias added on every rank before the all-reduce:
// give the parameter this rank's slab of a seeded random logical tensor.
void set_logical(torch::Tensor& param, const TensorShard& shard, int tp_rank, int tp_size,
                 std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  param.copy_(shard_of(seeded_randn(shard.logical_shape, seed), shard, tp_rank, tp_size));
}

TensorShard shard_named(const std::vector<std::pair<std::string, TensorShard>>& shards,
                        const std::string& name) {
  for (const auto& [n, s] : shards) {
    if (n == name) return s;
  }
  ADD_FAILURE() << "no shard named " << name;
  return {};
}

// This rank's output columns of a logical [.., out] tensor, as a column-parallel layer lays them
// out: per stacked block its slice, zero-padded past `out`.
torch::Tensor local_columns(const torch::Tensor& full, std::int64_t stacked, int tp_rank,
                            int tp_size) {
  const std::int64_t out = full.size(-1);
  std::vector<std::int64_t> shape(full.sizes().begin(), full.sizes().end() - 1);
  shape.push_back(stacked);
  shape.push_back(out / stacked);
  torch::Tensor blocks = full.reshape(shape);  // [.., P, out/P]
  TensorShard s{blocks.sizes().vec(), static_cast<int>(blocks.dim()) - 1};
  torch::Tensor local = shard_of(blocks, s, tp_rank, tp_size);
  std::vector<std::int64_t> local_shape = full.sizes().vec();
  local_shape.back() = -1;
  return local.reshape(local_shape);
}

TEST(ColumnParallelLinear, MatchesUnshardedForwardAndGradients) {
  struct Case {
    std::int64_t out;
    bool bias;
    bool gather;
    std::int64_t stacked;
    bool pad;
  };
  const std::vector<Case> cases = {{12, true, false, 1, false},
                                   {12, true, true, 1, false},
                                   {24, true, false, 3, false},
                                   {8, false, true, 1, false},
                                   {10, false, false, 1, true}};
  const std::int64_t in = 6;
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    for (const auto& c : cases) {
      const std::string what = "tp=" + std::to_string(tp) + " out=" + std::to_string(c.out) +
                               " gather=" + std::to_string(c.gather) +
                               " stacked=" + std::to_string(c.stacked);
      ColumnParallelLinear layer(ColumnParallelLinearOptions(in, c.out)
                                     .bias(c.bias)
                                     .gather_output(c.gather)
                                     .stacked(c.stacked)
                                     .pad_outputs(c.pad),
                                 g.tp, "col", kSeed);
      // Same logical weights as the unsharded layer, bit for bit.
      ColumnParallelLinear whole(
          ColumnParallelLinearOptions(in, c.out).bias(c.bias).stacked(c.stacked).pad_outputs(c.pad),
          nullptr, "col", kSeed);
      const auto w_shard = shard_named(layer.shards(), "weight");
      expect_close(gather_logical(layer.weight.detach(), w_shard, g.tp), whole.weight, 0,
                   what + " initial weight");
      layer.to(torch::kDouble);
      if (c.bias) set_logical(layer.bias, shard_named(layer.shards(), "bias"), r, tp, 13);
      auto w = logical_leaf(layer.weight, w_shard, g.tp);
      torch::Tensor b;
      if (c.bias) b = logical_leaf(layer.bias, shard_named(layer.shards(), "bias"), g.tp);

      auto x = seeded_randn({2, 3, in}, 11).requires_grad_();
      auto x_ref = x.detach().clone().requires_grad_();
      auto y = layer.forward(x);
      auto w2d = w.reshape({c.out, in});
      auto y_ref =
          c.bias ? torch::linear(x_ref, w2d, b.reshape({c.out})) : torch::linear(x_ref, w2d);
      auto upstream = seeded_randn({2, 3, c.out}, 12);
      if (c.gather) {
        expect_close(y, y_ref, kTol, what + " output");
        (y * upstream).sum().backward();
      } else {
        expect_close(y, local_columns(y_ref.detach(), c.stacked, r, tp), kTol, what + " output");
        (y * local_columns(upstream, c.stacked, r, tp)).sum().backward();
      }
      (y_ref * upstream).sum().backward();
      expect_close(x.grad(), x_ref.grad(), kTol, what + " input grad");
      expect_close(layer.weight.grad(), shard_of(w.grad(), w_shard, r, tp), kTol,
                   what + " weight grad");
      if (c.bias) {
        expect_close(layer.bias.grad(),
                     shard_of(b.grad(), shard_named(layer.shards(), "bias"), r, tp), kTol,
                     what + " bias grad");
      }
    }
  }
}

TEST(RowParallelLinear, MatchesUnshardedForwardAndGradients) {
  const std::int64_t in = 8;
  const std::int64_t out = 5;
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    const std::int64_t chunk = in / tp;
    for (bool input_is_parallel : {true, false}) {
      for (bool bias : {true, false}) {
        const std::string what = "tp=" + std::to_string(tp) +
                                 " input_is_parallel=" + std::to_string(input_is_parallel) +
                                 " bias=" + std::to_string(bias);
        auto options =
            RowParallelLinearOptions(in, out).bias(bias).input_is_parallel(input_is_parallel);
        RowParallelLinear layer(options, g.tp, "row", kSeed);
        RowParallelLinear whole(options, nullptr, "row", kSeed);
        const auto w_shard = shard_named(layer.shards(), "weight");
        expect_close(gather_logical(layer.weight.detach(), w_shard, g.tp), whole.weight, 0,
                     what + " initial weight");
        layer.to(torch::kDouble);
        if (bias) set_logical(layer.bias, shard_named(layer.shards(), "bias"), r, tp, 23);
        auto w = logical_leaf(layer.weight, w_shard, g.tp);
        torch::Tensor b;
        if (bias) b = layer.bias.detach().clone().requires_grad_();

        auto x_full = seeded_randn({2, 3, in}, 21);
        auto x = (input_is_parallel ? x_full.narrow(-1, r * chunk, chunk) : x_full)
                     .clone()
                     .requires_grad_();
        auto x_ref = x_full.clone().requires_grad_();
        auto y = layer.forward(x);
        auto y_ref = bias ? torch::linear(x_ref, w, b) : torch::linear(x_ref, w);
        expect_close(y, y_ref, kTol, what + " output");
        auto upstream = seeded_randn({2, 3, out}, 22);
        (y * upstream).sum().backward();
        (y_ref * upstream).sum().backward();
        expect_close(x.grad(),
                     input_is_parallel ? x_ref.grad().narrow(-1, r * chunk, chunk) : x_ref.grad(),
                     kTol, what + " input grad");
        expect_close(layer.weight.grad(), shard_of(w.grad(), w_shard, r, tp), kTol,
                     what + " weight grad");
        if (bias) expect_close(layer.bias.grad(), b.grad(), kTol, what + " bias grad");
      }
    }
  }
}

TEST(VocabParallelEmbedding, LookupAndTiedLogitsMatchUnsharded) {
  const std::int64_t dim = 5;
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    const int r = g.tp->rank();
    for (std::int64_t vocab :
         {16, 10, 5}) {  // 10 and 5 are padded at tp = 4 (5: a rank of padding)
      const std::string what = "tp=" + std::to_string(tp) + " vocab=" + std::to_string(vocab);
      VocabParallelEmbedding emb(vocab, dim, g.tp, "wte", kSeed);
      VocabParallelEmbedding whole(vocab, dim, nullptr, "wte", kSeed);
      const auto shard = shard_named(emb.shards(), "weight");
      EXPECT_EQ(emb.local_vocab(), (vocab + tp - 1) / tp) << what;
      expect_close(gather_logical(emb.weight.detach(), shard, g.tp), whole.weight, 0,
                   what + " initial weight");
      emb.to(torch::kDouble);
      auto w = logical_leaf(emb.weight, shard, g.tp);

      // Lookup: every id appears, the padding rows never do.
      auto ids = torch::cat({torch::arange(vocab), seeded_ids({3 * 7}, vocab, 31)}).view({-1, 1});
      auto y = emb.forward(ids);
      auto y_ref = torch::embedding(w, ids);
      expect_close(y, y_ref, kTol, what + " lookup");
      auto upstream = seeded_randn(y.sizes().vec(), 32);
      (y * upstream).sum().backward();
      (y_ref * upstream).sum().backward();
      expect_close(emb.weight.grad(), shard_of(w.grad(), shard, r, tp), kTol,
                   what + " lookup weight grad (padding rows zero)");

      // Tied head: this rank's logit columns; the padded columns are 0.
      emb.weight.mutable_grad() = torch::Tensor();
      w.mutable_grad() = torch::Tensor();
      auto h = seeded_randn({2, 4, dim}, 33).requires_grad_();
      auto h_ref = h.detach().clone().requires_grad_();
      auto logits = emb.logits(h);
      auto logits_ref = torch::matmul(h_ref, w.t());
      TensorShard cols{logits_ref.sizes().vec(), 2};
      expect_close(logits, shard_of(logits_ref.detach(), cols, r, tp), kTol, what + " logits");
      auto up = seeded_randn(logits_ref.sizes().vec(), 34);
      (logits * shard_of(up, cols, r, tp)).sum().backward();
      (logits_ref * up).sum().backward();
      expect_close(h.grad(), h_ref.grad(), kTol, what + " hidden grad");
      expect_close(emb.weight.grad(), shard_of(w.grad(), shard, r, tp), kTol,
                   what + " head weight grad");
    }
  }
}

TEST(TensorParallelLayers, IndivisibleSizesThrowConfigErrorNamingTheLayer) {
  auto check = [](auto&& build, const std::string& name) {
    try {
      build();
      ADD_FAILURE() << name << ": no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  for (int tp : tp_sizes()) {
    if (tp == 1) continue;
    auto g = make_group(tp);
    check([&] { ColumnParallelLinear(ColumnParallelLinearOptions(4, 4 * tp + 1), g.tp, "c1", 1); },
          "c1");
    check([&] { RowParallelLinear(RowParallelLinearOptions(4 * tp + 1, 4), g.tp, "r1", 1); }, "r1");
    check(
        [&] {
          ColumnParallelLinear(ColumnParallelLinearOptions(4, 3 * (tp + 1)).stacked(3), g.tp, "qkv",
                               1);
        },
        "qkv");
  }
}

}  // namespace
}  // namespace hpctrain::parallel
