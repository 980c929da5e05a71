// The transformer block of the GPT model: causal self-attention and MLP, each a column-parallel
// layer followed by a row-parallel one, so a block costs two all-reduces forward and two backward.

#include <cmath>

#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/quantized_linear.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {
namespace {

// GPT-2: residual projections start smaller so the residual stream's variance does not grow
// with depth (each block adds two of them).
double residual_std(const GptOptions& options) {
  return 0.02 / std::sqrt(2.0 * static_cast<double>(options.layers));
}

}  // namespace

torch::Tensor int8_or_float(const Model* owner, parallel::ColumnParallelLinear& layer,
                            const torch::Tensor& x) {
  const QuantizedLinear* q = owner != nullptr ? owner->int8_linear(&layer) : nullptr;
  return q != nullptr ? q->forward(x) : layer.forward(x);
}

torch::Tensor int8_or_float(const Model* owner, parallel::RowParallelLinear& layer,
                            const torch::Tensor& x) {
  const QuantizedLinear* q = owner != nullptr ? owner->int8_linear(&layer) : nullptr;
  return q != nullptr ? q->forward(x) : layer.forward(x);
}

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
  const std::int64_t bh = batch * local_heads_;
  // [B, T, 3 * H * hd] -> [3, B, H, T, hd]: one copy lays out q, k and v as contiguous batches
  // of per-head matrices for bmm.
  torch::Tensor qkv_heads = int8_or_float(int8_owner, *qkv, x)
                                .view({batch, t, 3, local_heads_, head_dim_})
                                .permute({2, 0, 3, 1, 4})
                                .contiguous();
  if (kernel_ == GptAttentionKernel::kScaledDotProduct) {
    // [B, H, T, hd] each; causal without a mask tensor (the fused kernels skip masked blocks).
    // With recompute=attention the call is replayed in backward like the explicit core.
    const double p = is_training() ? dropout_ : 0.0;
    auto attend = [p](const std::vector<torch::Tensor>& in) {
      return compat::causal_scaled_dot_product_attention(in[0], in[1], in[2], p);
    };
    const std::vector<torch::Tensor> heads{qkv_heads[0], qkv_heads[1], qkv_heads[2]};
    torch::Tensor context = recompute_ && is_training() ? recompute(attend, heads) : attend(heads);
    return int8_or_float(int8_owner, *proj,
                         context.transpose(1, 2).reshape({batch, t, local_heads_ * head_dim_}));
  }
  torch::Tensor q = qkv_heads[0].view({bh, t, head_dim_});
  torch::Tensor k = qkv_heads[1].view({bh, t, head_dim_});
  torch::Tensor v = qkv_heads[2].view({bh, t, head_dim_});
  torch::Tensor context = recompute_ && is_training()
                              ? recompute(
                                    [this, mask](const std::vector<torch::Tensor>& in) {
                                      return core(in[0], in[1], in[2], mask);
                                    },
                                    {q, k, v})
                              : core(q, k, v, mask);
  context = context  // [B H, T, hd] -> [B, T, H hd]
                .view({batch, local_heads_, t, head_dim_})
                .transpose(1, 2)
                .reshape({batch, t, local_heads_ * head_dim_});
  return int8_or_float(int8_owner, *proj, context);
}

torch::Tensor GptAttention::core(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& mask) {
  // scores = mask + q k^T / sqrt(hd) in one fused call; the [T, T] mask broadcasts over B * H.
  torch::Tensor scores = torch::baddbmm(mask, q, k.transpose(1, 2), /*beta=*/1.0,
                                        /*alpha=*/1.0 / std::sqrt(static_cast<double>(head_dim_)));
  torch::Tensor probs = torch::softmax(scores, -1);
  if (dropout_ > 0) probs = torch::dropout(probs, dropout_, is_training());
  return torch::bmm(probs, v);
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
  const torch::Tensor scores =
      torch::matmul(qkv_heads[0], k.transpose(-2, -1))
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
