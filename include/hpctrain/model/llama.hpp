#pragma once
// The llama family: the decoder-only language models people train now (Llama-3, Qwen2, Qwen3,
// Mistral), one model with the switches they differ by, tensor-parallel over the tp group and cut
// into pipeline stages like the gpt (docs/MODELS.md, "The llama family").
//
//   model: {name: llama, architecture: llama, vocab_size: 128256, seq_len: 2048, layers: 16,
//           width: 2048, heads: 32, kv_heads: 8, ffn_width: 8192, rope_theta: 500000,
//           rope_scaling: llama3, tied_embeddings: true}
//
// Token embedding (no positions), `layers` pre-norm blocks, a final RMSNorm and an output head
// (the embedding itself when tied, else its own vocabulary-parallel matrix). A block:
//   h = x + o(attention(rope(qnorm(q(rms1(x)))), rope(knorm(k(rms1(x)))), v(rms1(x))))
//   y = h + down(silu(gate(rms2(h))) * up(rms2(h)))
// RMSNorm x / sqrt(mean(x^2) + norm_eps) * w; rotary embedding with base rope_theta rotating the
// two halves of each head (dimension i with i + head_dim/2, as Hugging Face's files expect),
// optionally with Llama-3.1's frequency scaling; grouped-query attention (query head j reads
// key/value head j / (heads / kv_heads)); q/k/v bias with qkv_bias (Qwen2); per-head RMSNorm of q
// and k before the rotation with qk_norm (Qwen3); no dropout.
//
// Tensor parallelism: q, k, v column-parallel (this rank's heads; k and v hold kv_heads / tp heads
// when tp divides kv_heads, else every rank holds all of them, replicated, and uses those its
// query heads read), o row-parallel; gate and up one stacked column-parallel layer, down
// row-parallel; vocabulary-parallel embedding, head and loss.
//
// Parameters (state_dict names, logical shape, split dim; D = width, hd = head_dim, H = heads,
// KV = kv_heads, F = ffn_width, V = vocab_size):
//   wte.weight                      [V, D]        0   (padded to ceil(V / tp) rows per rank)
//   blocks.i.attn_norm.weight       [D]           replicated
//   blocks.i.attn.q.weight / bias   [H hd, D]     0   (bias with qkv_bias)
//   blocks.i.attn.k.weight / bias   [KV hd, D]    0   (replicated when tp does not divide KV)
//   blocks.i.attn.v.weight / bias   [KV hd, D]    0   (likewise)
//   blocks.i.attn.q_norm.weight     [hd]          replicated (qk_norm)
//   blocks.i.attn.k_norm.weight     [hd]          replicated (qk_norm)
//   blocks.i.attn.o.weight          [D, H hd]     1
//   blocks.i.mlp_norm.weight        [D]           replicated
//   blocks.i.mlp.gate_up.weight     [2, F, D]     1   (gate, then up)
//   blocks.i.mlp.down.weight        [D, F]        1
//   norm.weight                     [D]           replicated
//   lm_head.weight                  [V, D]        0   (untied only; padded like wte)

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/model/decoder_parts.hpp"
#include "hpctrain/model/kv_cache.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/recompute.hpp"
#include "hpctrain/parallel/tensor_parallel_linear.hpp"
#include "hpctrain/parallel/vocab_parallel_embedding.hpp"
#include "hpctrain/plan/compute_plan.hpp"

namespace hpctrain::model {

/// The published architecture a llama model follows (model.architecture): it sets the defaults
/// of the switches (qwen2: qkv_bias; qwen3: qk_norm) and the name a Hugging Face export writes.
enum class LlamaArchitecture { kLlama, kQwen2, kQwen3, kMistral };

/// Llama-3.1's rotary frequency scaling (model.rope_scaling: llama3): wavelengths below
/// original_context / high_freq_factor are kept, those above original_context / low_freq_factor
/// are stretched by `factor`, and those between are blended.
struct RopeScaling {
  bool llama3 = false;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_context = 8192;
};

/// The model section of a llama model, validated.
struct LlamaOptions {
  LlamaArchitecture architecture = LlamaArchitecture::kLlama;
  std::int64_t vocab_size = 256;
  std::int64_t seq_len = 128;
  std::int64_t layers = 4;
  std::int64_t width = 128;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 4;
  std::int64_t head_dim = 32;      ///< default width / heads
  std::int64_t ffn_width = 0;      ///< SwiGLU features F (default 3 * width)
  std::int64_t max_positions = 0;  ///< positions the model is meant for (default seq_len)
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  RopeScaling rope;
  bool qkv_bias = false;
  bool qk_norm = false;
  bool tied_embeddings = false;
  double init_std = 0.02;
  AttentionKernel attention = AttentionKernel::kExplicit;
  Recompute recompute = Recompute::kNone;

  /// Whether the k and v projections are split across `tp` ranks (tp divides kv_heads) or
  /// replicated. Local.
  bool kv_split(int tp) const { return kv_heads % tp == 0; }
};

/// model.architecture's name ("llama", "qwen2", "qwen3", "mistral"). Local.
std::string llama_architecture_name(LlamaArchitecture a);

/// The shape `hpctrain plan`, the memory plan and the ledger count (plan/compute_plan.hpp). Local.
plan::TransformerShape llama_shape(const LlamaOptions& options);

/// Reads model.{architecture, vocab_size, seq_len, layers, width, heads, kv_heads, head_dim,
/// ffn_width, max_positions, norm_eps, rope_theta, rope_scaling, rope_factor,
/// rope_low_freq_factor, rope_high_freq_factor, rope_original_context, qkv_bias, qk_norm,
/// tied_embeddings, init_std, attention, recompute} (after model.init_from's config.json, when it
/// names a Hugging Face folder, has set or checked them: model/llama_hf.hpp) and checks them for
/// a tp group of `tp_size` ranks: tp divides heads and ffn_width, kv_heads divides heads,
/// head_dim even. Throws ConfigError naming the key. Local.
LlamaOptions read_llama_options(ConfigSection& section, int tp_size);

/// The rotary embedding's angle tables: cos and sin [seq_len, head_dim / 2] of m * w_j, computed
/// in float64 and kept in the dtype and device of the activations.
class RotaryTable {
 public:
  explicit RotaryTable(const LlamaOptions& options);
  /// Rotates the halves of each head of x [B, T, H, hd]: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s).
  /// Local.
  torch::Tensor rotate(const torch::Tensor& x);
  /// The same rotation at position ids `positions` [B, T] (int64, < seq_len) instead of 0..T-1
  /// (incremental decoding: a row's new tokens after its cached ones). Local.
  torch::Tensor rotate_at(const torch::Tensor& x, const torch::Tensor& positions);
  /// The frequencies w_j, j < head_dim / 2, scaling applied (float64). Local.
  const std::vector<double>& frequencies() const { return frequencies_; }

 private:
  void build_tables(const torch::Tensor& like);
  torch::Tensor rotate_with(const torch::Tensor& x, const torch::Tensor& c, const torch::Tensor& s);

  std::vector<double> frequencies_;
  std::int64_t seq_len_;
  torch::Tensor cos_;
  torch::Tensor sin_;
};

/// RMSNorm's weight ("<name>.weight", starting at ones) and its function.
class RmsNorm : public torch::nn::Module {
 public:
  RmsNorm(std::int64_t dim, double eps);
  /// x / sqrt(mean(x^2, last dim) + eps) * weight, the statistics in float32, the result in x's
  /// dtype times the weight. With `tp` set (a norm of this rank's heads only), the weight's
  /// gradient is summed over the tp group, so it is the same on every rank. Local (collective
  /// over tp in backward when tp is set).
  torch::Tensor forward(const torch::Tensor& x, const parallel::CommPtr& tp = nullptr);

  torch::Tensor weight;

 private:
  double eps_;
};

/// Grouped-query causal self-attention with rotary positions, tensor-parallel over the tp group.
class LlamaAttention : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0.attn"). Local.
  LlamaAttention(const LlamaOptions& options, parallel::CommPtr tp, const std::string& name,
                 std::uint64_t seed, std::shared_ptr<RotaryTable> rope);
  /// x [B, T, D] (the same on every tp rank) -> [B, T, D]. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  /// Incremental decoding (model/kv_cache.hpp): x [B, t, D] of the positions after
  /// cache.length(), rotated at `positions` [B, t] (KvCache::positions); appends their keys and
  /// values (the kv heads this rank holds, before the grouping) as attention layer `layer` and
  /// attends over every cached position; `mask` is KvCache::mask(t). No backward. Collective
  /// over tp.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                               const torch::Tensor& positions, KvCache& cache, std::int64_t layer);
  /// The kv heads this rank's k and v projections compute (kv_heads / tp when split, else all of
  /// them). Local.
  std::int64_t held_kv_heads() const { return held_kv_; }
  /// The tp split of the split parameters, by name relative to this module (q, o, and k and v
  /// when tp divides kv_heads); the others are replicated. Local.
  std::vector<std::pair<std::string, parallel::TensorShard>> shards() const;

  std::shared_ptr<parallel::ColumnParallelLinear> q, k, v;
  std::shared_ptr<parallel::RowParallelLinear> o;
  std::shared_ptr<RmsNorm> q_norm;  ///< [head_dim], qk_norm only
  std::shared_ptr<RmsNorm> k_norm;
  const Model* int8_owner = nullptr;  ///< as GptAttention::int8_owner

 private:
  torch::Tensor project(parallel::ColumnParallelLinear& layer, const torch::Tensor& x);
  // (k, v) [B, T, kv, hd] grouped for this rank's query heads (kv_index_, when not identity).
  void group_kv(torch::Tensor& kh, torch::Tensor& vh, std::int64_t dim);

  parallel::CommPtr tp_;
  std::shared_ptr<RotaryTable> rope_;
  std::int64_t local_heads_;
  std::int64_t head_dim_;
  bool kv_split_;
  std::int64_t held_kv_ = 0;
  torch::Tensor kv_index_;  ///< the kv head (local when split, global when replicated) per q head
  AttentionKernel kernel_;
  bool recompute_;
};

/// The SwiGLU MLP: gate and up stacked column-parallel (D -> 2 x F), down row-parallel.
class LlamaMlp : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0.mlp"). Local.
  LlamaMlp(const LlamaOptions& options, parallel::CommPtr tp, const std::string& name,
           std::uint64_t seed);
  /// [B, T, D] -> [B, T, D]. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x);

  std::shared_ptr<parallel::ColumnParallelLinear> gate_up;
  std::shared_ptr<parallel::RowParallelLinear> down;
  const Model* int8_owner = nullptr;
};

/// One pre-norm block: x + attn(rms(x)), then + mlp(rms(.)). Shaped as a block of a decoder
/// stack (forward of the residual stream and the causal mask, and the tp split of its
/// parameters), so it moves onto a shared decoder base unchanged.
class LlamaBlock : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0"); `rope`, the model's rotary table, shared by
  /// every block. Local.
  LlamaBlock(const LlamaOptions& options, parallel::CommPtr tp, const std::string& name,
             std::uint64_t seed, std::shared_ptr<RotaryTable> rope);
  /// [B, T, D] -> [B, T, D]. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  /// The block over the positions after cache.length() (LlamaAttention::forward_cached).
  /// Collective over tp.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& mask,
                               const torch::Tensor& positions, KvCache& cache, std::int64_t layer);
  /// The tp split of the block's split parameters, by name inside the block
  /// ("attn.q.weight"); every other parameter is replicated over tp. Local.
  std::vector<std::pair<std::string, parallel::TensorShard>> shards() const;

  std::shared_ptr<RmsNorm> attn_norm;  ///< [D]
  std::shared_ptr<LlamaAttention> attn;
  std::shared_ptr<RmsNorm> mlp_norm;  ///< [D]
  std::shared_ptr<LlamaMlp> mlp;
};

/// The llama model (see the top of this file); it decodes incrementally (model/kv_cache.hpp,
/// src/model/llama_decode.cpp).
class Llama : public Model, public IncrementalDecoder {
 public:
  /// Builds the model for tp group `tp` (null: unsharded) with every weight drawn from (seed,
  /// parameter name), as the gpt does, so any tp and any cut into stages start alike. Throws
  /// ConfigError when the pipeline has more stages than blocks. Local.
  Llama(const LlamaOptions& options, parallel::CommPtr tp, std::uint64_t seed,
        const PipelinePart& pipeline = {});

  /// int64 tokens [B, T] -> this rank's vocabulary slice of the logits [B, T, ceil(V / tp)].
  /// The whole model only. Collective over tp.
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int pipeline_chunks() const override { return static_cast<int>(chunks_.size()); }
  /// As Gpt::forward_chunk. Collective over tp.
  torch::Tensor forward_chunk(int chunk, const torch::Tensor& input) override;
  /// [B, T, width] for tokens [B, T]. Local.
  std::vector<std::int64_t> stage_activation_shape(const torch::Tensor& inputs) const override;
  /// The tied wte's copies (decoder_parts.hpp). Local.
  std::vector<StageCopy> stage_copies() const override;
  /// Next-token loss (decoder_parts.hpp, language_model_loss). Collective over tp.
  LossOutput loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  Task task() const override { return Task::kLanguageModel; }
  bool waits_for_parameters() const override { return true; }
  /// One unit per block (the embedding, the final norm and the head form the root).
  std::vector<std::vector<std::string>> parameter_units() const override;
  /// Per sequence of seq_len tokens: 2 N T + 2 layers T^2 heads head_dim, N = the logical
  /// parameters of the blocks, the final norm and the output head (the head counts, the
  /// embedding lookup does not; plan/compute_plan.hpp, transformer_shape). Local.
  double forward_flops_per_sample() const override;
  /// Logical shape and split of every parameter (table at the top of this file). Local.
  ShardInfo shard_info(const std::string& name) const override;
  /// Incremental decoding of the whole model (not a pipeline stage): a cache of every block's
  /// keys and values for the kv heads this rank holds. Local.
  std::unique_ptr<KvCache> make_kv_cache(std::int64_t batch, std::int64_t capacity,
                                         const torch::Tensor& padding) override;
  /// Logits of the positions after cache.length(), rotated at their position ids (numbered after
  /// each row's padding, at most seq_len - 1). Collective over tp.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KvCache& cache) override;
  std::int64_t context_length() const override { return options_.seq_len; }
  /// The vocabulary slices gathered over tp, padding columns dropped. Collective over tp.
  torch::Tensor full_logits(const torch::Tensor& outputs) override;
  /// -vocab_parallel_cross_entropy: no rank holds the full logits. Collective over tp.
  torch::Tensor target_log_probs(const torch::Tensor& outputs,
                                 const torch::Tensor& targets) override;

  const LlamaOptions& options() const { return options_; }
  const parallel::CommPtr& tp() const { return tp_; }

  std::shared_ptr<parallel::VocabParallelEmbedding> wte;
  std::shared_ptr<torch::nn::Module> blocks;
  std::shared_ptr<RmsNorm> norm;  ///< final RMSNorm [D] (last stage)
  std::shared_ptr<parallel::ColumnParallelLinear> lm_head;

 private:
  void add_shards(const std::string& prefix,
                  const std::vector<std::pair<std::string, parallel::TensorShard>>& shards);

  LlamaOptions options_;
  parallel::CommPtr tp_;
  PipelinePart pipeline_;
  std::vector<DecoderChunk> chunks_;
  std::map<std::string, ShardInfo> shard_infos_;
  std::map<std::int64_t, std::shared_ptr<LlamaBlock>> blocks_;
  CausalMask causal_mask_;
  std::shared_ptr<RotaryTable> rope_;
};

}  // namespace hpctrain::model
