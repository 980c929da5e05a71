// The llama family's block: RMSNorm, grouped-query attention with rotary positions, SwiGLU MLP
// (model/llama.hpp).

#include <cmath>

#include "hpctrain/model/llama.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

RmsNorm::RmsNorm(std::int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNorm::forward(const torch::Tensor& x, const parallel::CommPtr& tp) {
  const torch::Tensor xf = x.to(torch::kFloat);
  const torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  const torch::Tensor w = tp ? parallel::copy_to_tp_region(weight, tp) : weight;
  return normed.to(x.scalar_type()) * w;
}

RotaryTable::RotaryTable(const LlamaOptions& options) : seq_len_(options.seq_len) {
  const std::int64_t half = options.head_dim / 2;
  const RopeScaling& r = options.rope;
  constexpr double kPi = 3.14159265358979323846;
  for (std::int64_t j = 0; j < half; ++j) {
    double w = std::pow(options.rope_theta,
                        -2.0 * static_cast<double>(j) / static_cast<double>(options.head_dim));
    if (r.llama3) {
      // Llama-3.1: long wavelengths (low frequencies) stretched by `factor`, short ones kept, a
      // linear blend in original_context / wavelength between.
      const double wavelength = 2 * kPi / w;
      const double context = static_cast<double>(r.original_context);
      if (wavelength > context / r.low_freq_factor) {
        w /= r.factor;
      } else if (wavelength >= context / r.high_freq_factor) {
        const double blend =
            (context / wavelength - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
        w = (1 - blend) * w / r.factor + blend * w;
      }
    }
    frequencies_.push_back(w);
  }
}

void RotaryTable::build_tables(const torch::Tensor& like) {
  if (cos_.defined() && cos_.device() == like.device() &&
      cos_.scalar_type() == like.scalar_type()) {
    return;
  }
  // Normal tensors even when first built in an inference-mode forward (evaluation): training
  // saves them for backward, which inference tensors cannot be.
  c10::InferenceMode normal(false);
  torch::NoGradGuard no_grad;
  const auto half = static_cast<std::int64_t>(frequencies_.size());
  const torch::Tensor w = torch::tensor(frequencies_, torch::kDouble);
  const torch::Tensor angles =
      torch::outer(torch::arange(seq_len_, torch::TensorOptions(torch::kDouble)), w);
  cos_ = angles.cos().to(like.options()).view({seq_len_, half});
  sin_ = angles.sin().to(like.options()).view({seq_len_, half});
}

torch::Tensor RotaryTable::rotate_with(const torch::Tensor& x, const torch::Tensor& c,
                                       const torch::Tensor& s) {
  const std::int64_t half = x.size(3) / 2;
  const torch::Tensor x1 = x.narrow(3, 0, half);
  const torch::Tensor x2 = x.narrow(3, half, half);
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, 3);
}

torch::Tensor RotaryTable::rotate(const torch::Tensor& x) {
  build_tables(x);
  const std::int64_t t = x.size(1);
  const std::int64_t half = x.size(3) / 2;
  return rotate_with(x, cos_.narrow(0, 0, t).view({1, t, 1, half}),
                     sin_.narrow(0, 0, t).view({1, t, 1, half}));
}

torch::Tensor RotaryTable::rotate_at(const torch::Tensor& x, const torch::Tensor& positions) {
  build_tables(x);
  const std::int64_t b = x.size(0);
  const std::int64_t t = x.size(1);
  const std::int64_t half = x.size(3) / 2;
  const torch::Tensor index = positions.flatten().to(cos_.device());
  return rotate_with(x, cos_.index_select(0, index).view({b, t, 1, half}),
                     sin_.index_select(0, index).view({b, t, 1, half}));
}

LlamaAttention::LlamaAttention(const LlamaOptions& options, parallel::CommPtr tp,
                               const std::string& name, std::uint64_t seed,
                               std::shared_ptr<RotaryTable> rope)
    : tp_(std::move(tp)),
      rope_(std::move(rope)),
      local_heads_(options.heads / parallel::tp_size_of(tp_)),
      head_dim_(options.head_dim),
      kv_split_(options.kv_split(parallel::tp_size_of(tp_))),
      kernel_(options.attention),
      recompute_(options.recompute == Recompute::kAttention) {
  const std::int64_t d = options.width;
  const std::int64_t hd = options.head_dim;
  using parallel::ColumnParallelLinearOptions;
  auto column = [&](const std::string& n, std::int64_t out, const parallel::CommPtr& group) {
    return register_module(
        n,
        std::make_shared<parallel::ColumnParallelLinear>(
            ColumnParallelLinearOptions(d, out).bias(options.qkv_bias).init_std(options.init_std),
            group, name + "." + n, seed));
  };
  // Replicated k and v are built unsharded (drawn whole, alike on every rank).
  const parallel::CommPtr kv_group = kv_split_ ? tp_ : nullptr;
  q = column("q", options.heads * hd, tp_);
  k = column("k", options.kv_heads * hd, kv_group);
  v = column("v", options.kv_heads * hd, kv_group);
  if (options.qk_norm) {
    q_norm = register_module("q_norm", std::make_shared<RmsNorm>(hd, options.norm_eps));
    k_norm = register_module("k_norm", std::make_shared<RmsNorm>(hd, options.norm_eps));
  }
  o = register_module("o", std::make_shared<parallel::RowParallelLinear>(
                               parallel::RowParallelLinearOptions(options.heads * hd, d)
                                   .bias(false)
                                   .init_std(options.init_std),
                               tp_, name + ".o", seed));
  // Query head g (global) reads kv head g / (heads / kv_heads).
  const std::int64_t group = options.heads / options.kv_heads;
  const std::int64_t first_head = parallel::tp_rank_of(tp_) * local_heads_;
  const std::int64_t first_kv = kv_split_ ? first_head / group : 0;
  std::vector<std::int64_t> index;
  // Identity only when this rank holds exactly its query heads' kv heads, one each (a replicated
  // k holds all kv_heads, more than the one query head of a rank at tp = heads).
  held_kv_ = kv_split_ ? options.kv_heads / parallel::tp_size_of(tp_) : options.kv_heads;
  bool identity = held_kv_ == local_heads_;
  for (std::int64_t j = 0; j < local_heads_; ++j) {
    index.push_back((first_head + j) / group - first_kv);
    identity = identity && index.back() == j;
  }
  if (!identity) kv_index_ = torch::tensor(index, torch::kLong);
}

std::vector<std::pair<std::string, parallel::TensorShard>> LlamaAttention::shards() const {
  std::vector<std::pair<std::string, parallel::TensorShard>> out;
  auto add = [&out](const std::string& layer, const auto& shards) {
    for (const auto& [name, shard] : shards) out.emplace_back(layer + "." + name, shard);
  };
  add("q", q->shards());
  // Replicated k and v (built unsharded) stay out: replicated over tp.
  if (kv_split_) {
    add("k", k->shards());
    add("v", v->shards());
  }
  add("o", o->shards());
  return out;
}

torch::Tensor LlamaAttention::project(parallel::ColumnParallelLinear& layer,
                                      const torch::Tensor& x) {
  // tp = 1: the layer itself, or its int8 replacement. tp > 1: x has passed copy_to_tp_region
  // once for q, k and v together (one all-reduce of the input gradient, not three).
  if (parallel::tp_size_of(tp_) == 1) return int8_or_float(int8_owner, layer, x);
  return layer.bias.defined() ? torch::linear(x, layer.weight, layer.bias)
                              : torch::linear(x, layer.weight);
}

void LlamaAttention::group_kv(torch::Tensor& kh, torch::Tensor& vh, std::int64_t dim) {
  if (!kv_index_.defined()) return;
  if (kv_index_.device() != kh.device()) {
    c10::InferenceMode normal(false);
    kv_index_ = kv_index_.to(kh.device());
  }
  kh = kh.index_select(dim, kv_index_);
  vh = vh.index_select(dim, kv_index_);
}

torch::Tensor LlamaAttention::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const std::int64_t batch = x.size(0);
  const std::int64_t t = x.size(1);
  const torch::Tensor xf = parallel::copy_to_tp_region(x, tp_);
  const parallel::CommPtr& partial = tp_ && tp_->size() > 1 ? tp_ : nullptr;
  torch::Tensor qh = project(*q, xf).view({batch, t, local_heads_, head_dim_});
  // Replicated k and v read x itself: their gradients are whole only once summed over the ranks'
  // query heads, which copy_to_tp_region on their output does (and their input gradient is then
  // whole on every rank, so it must not pass the all-reduce of xf again).
  const torch::Tensor kv_in = kv_split_ ? xf : x;
  torch::Tensor kh = project(*k, kv_in);
  torch::Tensor vh = project(*v, kv_in);
  kh = kh.view({batch, t, -1, head_dim_});
  vh = vh.view({batch, t, -1, head_dim_});
  if (q_norm) {
    qh = q_norm->forward(qh, partial);
    kh = k_norm->forward(kh, kv_split_ ? partial : nullptr);
  }
  if (!kv_split_) {
    kh = parallel::copy_to_tp_region(kh, tp_);
    vh = parallel::copy_to_tp_region(vh, tp_);
  }
  qh = rope_->rotate(qh);
  kh = rope_->rotate(kh);
  group_kv(kh, vh, 2);
  torch::Tensor context =
      causal_attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2), mask, kernel_,
                       /*dropout=*/0.0, is_training(), recompute_);
  return int8_or_float(int8_owner, *o, context);
}

LlamaMlp::LlamaMlp(const LlamaOptions& options, parallel::CommPtr tp, const std::string& name,
                   std::uint64_t seed) {
  const std::int64_t d = options.width;
  const std::int64_t f = options.ffn_width;
  gate_up = register_module(
      "gate_up",
      std::make_shared<parallel::ColumnParallelLinear>(
          parallel::ColumnParallelLinearOptions(d, 2 * f).stacked(2).bias(false).init_std(
              options.init_std),
          tp, name + ".gate_up", seed));
  down = register_module(
      "down", std::make_shared<parallel::RowParallelLinear>(
                  parallel::RowParallelLinearOptions(f, d).bias(false).init_std(options.init_std),
                  tp, name + ".down", seed));
}

torch::Tensor LlamaMlp::forward(const torch::Tensor& x) {
  // [.., 2 F / tp]: this rank's gate features, then its up features.
  const torch::Tensor both = int8_or_float(int8_owner, *gate_up, x);
  const std::int64_t f = both.size(-1) / 2;
  return int8_or_float(int8_owner, *down,
                       torch::silu(both.narrow(-1, 0, f)) * both.narrow(-1, f, f));
}

LlamaBlock::LlamaBlock(const LlamaOptions& options, parallel::CommPtr tp, const std::string& name,
                       std::uint64_t seed, std::shared_ptr<RotaryTable> rope) {
  attn_norm =
      register_module("attn_norm", std::make_shared<RmsNorm>(options.width, options.norm_eps));
  attn = register_module(
      "attn", std::make_shared<LlamaAttention>(options, tp, name + ".attn", seed, std::move(rope)));
  mlp_norm =
      register_module("mlp_norm", std::make_shared<RmsNorm>(options.width, options.norm_eps));
  mlp = register_module("mlp", std::make_shared<LlamaMlp>(options, tp, name + ".mlp", seed));
}

torch::Tensor LlamaBlock::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const torch::Tensor h = torch::add(x, attn->forward(attn_norm->forward(x), mask));
  return torch::add(h, mlp->forward(mlp_norm->forward(h)));
}

std::vector<std::pair<std::string, parallel::TensorShard>> LlamaBlock::shards() const {
  std::vector<std::pair<std::string, parallel::TensorShard>> out;
  for (const auto& [name, shard] : attn->shards()) out.emplace_back("attn." + name, shard);
  for (const auto& [name, shard] : mlp->gate_up->shards()) {
    out.emplace_back("mlp.gate_up." + name, shard);
  }
  for (const auto& [name, shard] : mlp->down->shards()) out.emplace_back("mlp.down." + name, shard);
  return out;
}

}  // namespace hpctrain::model
