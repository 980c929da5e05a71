// The transformer block of the GPT model: causal self-attention and MLP, each a column-parallel
// layer followed by a row-parallel one, so a block costs two all-reduces forward and two backward.

#include <cmath>

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {
namespace {

// GPT-2: residual projections start smaller so the residual stream's variance does not grow
// with depth (each block adds two of them).
double residual_std(const GptOptions& options) {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(options.layers));
}

}  // namespace

GptAttention::GptAttention(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
                           std::uint64_t seed)
    : local_heads_(options.heads / parallel::tp_size_of(tp)),
      head_dim_(options.width / options.heads),
      dropout_(options.dropout),
      kernel_(options.attention),
      recompute_(options.recompute == Recompute::kAttention) {
  const std::int64_t d = options.width;
  qkv = register_module("qkv", std::make_shared<parallel::ColumnParallelLinear>(
                                   parallel::ColumnParallelLinearOptions(d, 3 * d).stacked(3), tp,
                                   name + ".qkv", seed));
  proj = register_module(
      "proj", std::make_shared<parallel::RowParallelLinear>(
                  parallel::RowParallelLinearOptions(d, d).init_std(residual_std(options)), tp,
                  name + ".proj", seed));
}

torch::Tensor GptAttention::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  const std::int64_t batch = x.size(0);
  const std::int64_t t = x.size(1);
  // [B, T, 3 * H * hd] -> [3, B, H, T, hd]: one copy lays out q, k and v as contiguous batches
  // of per-head matrices.
  torch::Tensor qkv_heads = int8_or_float(int8_owner, *qkv, x)
                                .view({batch, t, 3, local_heads_, head_dim_})
                                .permute({2, 0, 3, 1, 4})
                                .contiguous();
  torch::Tensor context = causal_attention(qkv_heads[0], qkv_heads[1], qkv_heads[2], mask, kernel_,
                                           dropout_, is_training(), recompute_);
  return int8_or_float(int8_owner, *proj, context);
}

torch::Tensor GptAttention::forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                                           KvCache& cache, std::int64_t layer) {
  const std::int64_t batch = x.size(0);
  const std::int64_t t = x.size(1);
  // [3, B, H, t, hd]: q of the new positions; their k and v join the cache.
  const torch::Tensor qkv_heads = int8_or_float(int8_owner, *qkv, x)
                                      .view({batch, t, 3, local_heads_, head_dim_})
                                      .permute({2, 0, 3, 1, 4});
  const auto [k, v] = cache.append(layer, qkv_heads[1], qkv_heads[2]);  // [B, H, S, hd]
  // The same function as core(): mask + q k^T / sqrt(hd), softmax, times v.
  const torch::Tensor scores = torch::matmul(qkv_heads[0], k.transpose(-2, -1))
                                   .mul_(1.0 / std::sqrt(static_cast<double>(head_dim_)))
                                   .add_(mask);
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1), v);  // [B, H, t, hd]
  return int8_or_float(int8_owner, *proj,
                       context.transpose(1, 2).reshape({batch, t, local_heads_ * head_dim_}));
}

GptMlp::GptMlp(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
               std::uint64_t seed) {
  const std::int64_t d = options.width;
  const std::int64_t f = options.mlp_width();
  fc = register_module("fc",
                       std::make_shared<parallel::ColumnParallelLinear>(
                           parallel::ColumnParallelLinearOptions(d, f), tp, name + ".fc", seed));
  proj = register_module(
      "proj", std::make_shared<parallel::RowParallelLinear>(
                  parallel::RowParallelLinearOptions(f, d).init_std(residual_std(options)), tp,
                  name + ".proj", seed));
}

torch::Tensor GptMlp::forward(const torch::Tensor& x) {
  return int8_or_float(int8_owner, *proj, torch::gelu(int8_or_float(int8_owner, *fc, x), "tanh"));
}

GptBlock::GptBlock(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
                   std::uint64_t seed)
    : dropout_(options.dropout) {
  const auto norm = torch::nn::LayerNormOptions({options.width}).eps(1e-5);
  ln1 = register_module("ln1", torch::nn::LayerNorm(norm));
  attn = register_module("attn", std::make_shared<GptAttention>(options, tp, name + ".attn", seed));
  ln2 = register_module("ln2", torch::nn::LayerNorm(norm));
  mlp = register_module("mlp", std::make_shared<GptMlp>(options, tp, name + ".mlp", seed));
}

torch::Tensor GptBlock::forward(const torch::Tensor& x, const torch::Tensor& mask) {
  // Dropout on the replicated residual branch draws the same mask on every tp rank only if the
  // ranks' default generators agree (the trainer seeds them alike within a tp group).
  torch::Tensor h = attn->forward(ln1->forward(x), mask);
  if (dropout_ > 0) h = torch::dropout(h, dropout_, is_training());
  torch::Tensor y = torch::add(x, h);
  h = mlp->forward(ln2->forward(y));
  if (dropout_ > 0) h = torch::dropout(h, dropout_, is_training());
  return torch::add(y, h);
}

torch::Tensor GptBlock::forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                                       KvCache& cache, std::int64_t layer) {
  const torch::Tensor y = torch::add(x, attn->forward_cached(ln1->forward(x), mask, cache, layer));
  return torch::add(y, mlp->forward(ln2->forward(y)));
}

}  // namespace hpctrain::model
