// The GPT's part of incremental decoding (model/kv_cache.hpp, docs/GENERATE.md): its KV cache,
// the cached forward pass, and the whole-vocabulary views of its vocabulary-parallel logits that
// generation and multiple-choice evaluation read. The blocks' cached attention is in
// gpt_block.cpp.

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/parallel/tensor_parallel_ops.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

std::unique_ptr<KvCache> Gpt::make_kv_cache(std::int64_t batch, std::int64_t capacity,
                                            const torch::Tensor& padding) {
  if (pipeline_.cut()) return nullptr;  // one stage cannot decode alone
  const std::int64_t heads = options_.heads / parallel::tp_size_of(tp_);
  const auto like = wpe_weight_;
  return std::make_unique<KvCache>(options_.layers, batch, heads, options_.width / options_.heads,
                                   capacity, like.options().requires_grad(false), padding);
}

torch::Tensor Gpt::forward_cached(const torch::Tensor& tokens, KvCache& cache) {
  if (pipeline_.cut()) {
    throw Error("gpt: forward_cached of a model cut into pipeline stages (internal error)");
  }
  if (tokens.dim() != 2 || tokens.scalar_type() != torch::kLong ||
      tokens.size(0) != cache.batch()) {
    throw DataError(str("gpt: cached decoding takes int64 tokens [", cache.batch(), ", t], got ",
                        c10::toString(tokens.scalar_type()), " ", tokens.sizes()));
  }
  const std::int64_t t = tokens.size(1);
  // A row whose continuation ended (its context full) is fed on while the batch's other rows
  // go on: its positions may pass the table's last row, which they read instead; their outputs
  // are not used. The generator keeps every live row inside the context.
  const torch::Tensor positions =
      cache.positions(t, tokens.device()).clamp_max(options_.seq_len - 1);
  if (tokens.numel() > 0) {
    const auto lo = tokens.min().item<std::int64_t>();
    const auto hi = tokens.max().item<std::int64_t>();
    if (lo < 0 || hi >= options_.vocab_size) {
      throw DataError(str("gpt: token id ", lo < 0 ? lo : hi, " outside the vocabulary [0, ",
                          options_.vocab_size, ")"));
    }
  }
  torch::Tensor x = torch::add(
      wte->forward(tokens),
      wpe_weight_.index_select(0, positions.flatten()).view({tokens.size(0), t, options_.width}));
  const torch::Tensor mask = cache.mask(t, x);
  for (const auto& [index, block] : blocks_) x = block->forward_cached(x, mask, cache, index);
  cache.advance(t);
  x = ln_f->forward(x);
  return options_.tied_embeddings ? wte->logits(x) : int8_or_float(this, *lm_head, x);
}

torch::Tensor Gpt::full_logits(const torch::Tensor& outputs) {
  const torch::Tensor all =
      parallel::tp_size_of(tp_) > 1 ? parallel::gather_from_tp_region(outputs, tp_) : outputs;
  return all.narrow(-1, 0, options_.vocab_size);
}

torch::Tensor Gpt::target_log_probs(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return parallel::vocab_parallel_cross_entropy(outputs, targets, tp_, options_.vocab_size).neg();
}

}  // namespace hpctrain::model
