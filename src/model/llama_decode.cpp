// The llama family's part of incremental decoding (model/kv_cache.hpp, docs/GENERATE.md): its KV
// cache, the cached forward pass of the attention, the blocks and the model, and the
// whole-vocabulary views of its vocabulary-parallel logits that generation and multiple-choice
// evaluation read. The cache holds the keys (q/k-normed and rotated at their positions) and the
// values of the kv heads this tp rank computes, before the grouping of grouped-query attention:
// kv_heads / tp heads when tp divides kv_heads, else all kv_heads (replicated k and v).

#include <cmath>

#include "hpctrain/model/llama.hpp"
#include "hpctrain/parallel/tensor_parallel_ops.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

torch::Tensor LlamaAttention::forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                                             const torch::Tensor& positions, KvCache& cache,
                                             std::int64_t layer) {
  const std::int64_t batch = x.size(0);
  const std::int64_t t = x.size(1);
  // No backward here, so no copy_to_tp_region: every projection reads x itself.
  torch::Tensor qh = project(*q, x).view({batch, t, local_heads_, head_dim_});
  torch::Tensor kh = project(*k, x).view({batch, t, held_kv_, head_dim_});
  torch::Tensor vh = project(*v, x).view({batch, t, held_kv_, head_dim_});
  if (q_norm) {
    qh = q_norm->forward(qh);
    kh = k_norm->forward(kh);
  }
  qh = rope_->rotate_at(qh, positions);
  kh = rope_->rotate_at(kh, positions);
  // [B, kv, S, hd]: the held kv heads of every cached position, this step's included.
  auto [keys, values] = cache.append(layer, kh.transpose(1, 2), vh.transpose(1, 2));
  group_kv(keys, values, 1);  // [B, local_heads, S, hd]
  // The same function as causal_attention's explicit core: mask + q k^T / sqrt(hd), softmax,
  // times v.
  const torch::Tensor scores = torch::matmul(qh.transpose(1, 2), keys.transpose(-2, -1))
                                   .mul_(1.0 / std::sqrt(static_cast<double>(head_dim_)))
                                   .add_(mask);
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1), values);
  return int8_or_float(int8_owner, *o,
                       context.transpose(1, 2).reshape({batch, t, local_heads_ * head_dim_}));
}

torch::Tensor LlamaBlock::forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                                         const torch::Tensor& positions, KvCache& cache,
                                         std::int64_t layer) {
  const torch::Tensor h =
      torch::add(x, attn->forward_cached(attn_norm->forward(x), mask, positions, cache, layer));
  return torch::add(h, mlp->forward(mlp_norm->forward(h)));
}

std::unique_ptr<KvCache> Llama::make_kv_cache(std::int64_t batch, std::int64_t capacity,
                                              const torch::Tensor& padding) {
  if (pipeline_.cut()) return nullptr;  // one stage cannot decode alone
  const std::int64_t held = blocks_.begin()->second->attn->held_kv_heads();
  return std::make_unique<KvCache>(options_.layers, batch, held, options_.head_dim, capacity,
                                   norm->weight.options().requires_grad(false), padding);
}

torch::Tensor Llama::forward_cached(const torch::Tensor& tokens, KvCache& cache) {
  if (pipeline_.cut()) {
    throw Error("llama: forward_cached of a model cut into pipeline stages (internal error)");
  }
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong ||
      tokens.size(0) != cache.batch()) {
    throw DataError(str("llama: cached decoding takes int64 tokens [", cache.batch(), ", t], got ",
                        c10::toString(tokens.scalar_type()), " ", tokens.sizes()));
  }
  const std::int64_t t = tokens.size(1);
  // As the gpt's: a finished row fed on past the context reads the table's last row; its
  // outputs are not used.
  const torch::Tensor positions =
      cache.positions(t, tokens.device()).clamp_max(options_.seq_len - 1);
  if (tokens.numel() > 0) {
    const auto lo = tokens.min().item<std::int64_t>();
    const auto hi = tokens.max().item<std::int64_t>();
    if (lo < 0 || hi >= options_.vocab_size) {
      throw DataError(str("llama: token id ", lo < 0 ? lo : hi, " outside the vocabulary [0, ",
                          options_.vocab_size, ")"));
    }
  }
  torch::Tensor x = wte->forward(tokens);
  const torch::Tensor mask = cache.mask(t, x);
  for (const auto& [index, block] : blocks_) {
    x = block->forward_cached(x, mask, positions, cache, index);
  }
  cache.advance(t);
  x = norm->forward(x);
  return options_.tied_embeddings ? wte->logits(x) : int8_or_float(this, *lm_head, x);
}

torch::Tensor Llama::full_logits(const torch::Tensor& outputs) {
  const torch::Tensor all =
      parallel::tp_size_of(tp_) > 1 ? parallel::gather_from_tp_region(outputs, tp_) : outputs;
  return all.narrow(-1, 0, options_.vocab_size);
}

torch::Tensor Llama::target_log_probs(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return parallel::vocab_parallel_cross_entropy(outputs, targets, tp_, options_.vocab_size).neg();
}

}  // namespace hpctrain::model
