#pragma once
// The pieces every decoder-only language model of the zoo shares (the gpt, model/gpt.hpp, and the
// llama family, model/llama.hpp): which blocks each pipeline chunk of this rank holds, the checks
// of a batch of token ids, causal self-attention over per-head q, k, v (explicit or fused), the
// next-token loss over a vocabulary split across the tp group, and the tied embedding's copy on
// the last pipeline stage. A family supplies its block and its shape; these do the rest.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_linear.hpp"
#include "hpctrain/parallel/tensor_parallel_ops.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::model {

/// How attention scores, softmax and the weighted sum are computed: explicitly (baddbmm with the
/// causal mask, softmax, bmm: every LibTorch) or by scaled_dot_product_attention (LibTorch 2.x:
/// fused flash / memory-efficient kernels on GPU). Both compute the same function.
enum class AttentionKernel { kExplicit, kScaledDotProduct };

/// model.attention: auto (scaled_dot_product where LibTorch has it) | explicit | sdpa. Throws
/// ConfigError naming the key. Local.
AttentionKernel read_attention_kernel(ConfigSection& section);

/// One pipeline chunk of this rank: its model stage, the blocks [first, end) it holds, whether it
/// embeds the tokens (the first stage) and whether it computes the head (the last).
struct DecoderChunk {
  int stage = 0;
  std::int64_t first = 0;
  std::int64_t end = 0;
  bool embeds = true;
  bool heads = true;
};

/// This rank's chunks of a model of `layers` blocks cut as `pipeline` says (one chunk holding
/// everything when it is not cut). Local.
std::vector<DecoderChunk> decoder_chunks(const PipelinePart& pipeline, std::int64_t layers);

/// The tied token embedding's copies across stages: "wte.weight" on the first and the last stage
/// when both exist on different ranks (the first stage's copy is the primary). Local.
std::vector<StageCopy> tied_embedding_copies(const PipelinePart& pipeline,
                                             const std::vector<DecoderChunk>& chunks, bool tied);

/// Checks int64 token ids [B, T] with 1 <= T <= seq_len and, on the CPU, ids in
/// [0, vocab_size); throws DataError naming `model` ("gpt", "llama") and the key to change.
/// Local.
void check_token_batch(const torch::Tensor& inputs, std::int64_t seq_len, std::int64_t vocab_size,
                       const std::string& model);

/// Next-token loss of this rank's vocabulary slice of the logits [B, T, V / tp] against int64
/// targets [B, T]: loss = mean over tokens, loss_sum, correct = top-1 hits, count = B * T, the
/// same on every tp rank. Throws DataError naming `model` for mismatched shapes or (CPU) targets
/// outside the vocabulary. Collective over tp.
LossOutput language_model_loss(const torch::Tensor& outputs, const torch::Tensor& targets,
                               const parallel::CommPtr& tp, std::int64_t vocab_size,
                               const std::string& model);

/// The additive causal mask [seq_len, seq_len] (0 on and below the diagonal, -inf above), built
/// on first use for the device and dtype of the activations and kept (derived, not state).
class CausalMask {
 public:
  /// The mask's top-left [t, t] for activations like `like`. Local.
  torch::Tensor get(const torch::Tensor& like, std::int64_t seq_len, std::int64_t t);

 private:
  torch::Tensor mask_;
};

/// Causal self-attention of q, k, v [B, H, T, hd] (k and v already expanded to q's heads):
/// softmax(q k^T / sqrt(hd) + mask) v, dropout `dropout` on the probabilities while `training`,
/// through `kernel`; with `recompute` (model.recompute: attention, while training) the scores and
/// the softmax are recomputed in backward. Returns the context [B, T, H hd]. Local.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask,
                               AttentionKernel kernel, double dropout, bool training,
                               bool recompute);

/// `layer` applied to `x`: through its int8 replacement when `owner` (may be null) has one for
/// it (Model::set_int8_linear), else in float32. Collective over tp like the layer's forward
/// (int8 replacements exist at tp = 1 only).
torch::Tensor int8_or_float(const Model* owner, parallel::ColumnParallelLinear& layer,
                            const torch::Tensor& x);
/// As above, for a row-parallel layer. Collective over tp like the layer's forward.
torch::Tensor int8_or_float(const Model* owner, parallel::RowParallelLinear& layer,
                            const torch::Tensor& x);

}  // namespace hpctrain::model
