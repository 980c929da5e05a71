#pragma once
// GPT: a decoder-only transformer language model, tensor-parallel over the tp group
// (docs/TENSOR_PARALLEL.md has the whole picture).
//
//   model: {name: gpt, vocab_size: 256, seq_len: 128, layers: 4, heads: 4, width: 128,
//           mlp_ratio: 4, tied_embeddings: true, dropout: 0.0}
//
// Token + learned position embeddings, `layers` pre-norm blocks (LayerNorm -> causal
// self-attention with the heads split across tp ranks; LayerNorm -> MLP width -> mlp_ratio *
// width -> width with tanh-GELU), a final LayerNorm, and an output head: the token embedding
// itself (tied) or its own vocabulary-parallel matrix. forward() returns this rank's vocabulary
// slice of the logits; loss() uses the vocabulary-parallel cross entropy, so no rank ever holds
// the full logits.
//
// Cut into pipeline stages (parallel.pp > 1, docs/PIPELINE.md), a rank builds its stages only:
// the embeddings with the first stage, its blocks (parameters keep their names, "blocks.5.*" on
// whichever stage holds block 5), the final LayerNorm and the head with the last stage. With tied
// embeddings the last stage holds a copy of wte.weight for the head (drawn alike, so equal);
// stage_copies() names it, and the trainer sums the two copies' gradients.
//
// Parameters (state_dict names, logical shape, split dim; D = width, F = mlp_ratio * D,
// V = vocab_size, T = seq_len):
//   wte.weight                  [V, D]     0   (padded to ceil(V / tp) rows per rank)
//   wpe.weight                  [T, D]     replicated
//   blocks.i.ln1.weight/bias    [D]        replicated
//   blocks.i.attn.qkv.weight    [3, D, D]  1   (q, k, v stacked; a rank holds its heads of each)
//   blocks.i.attn.qkv.bias      [3, D]     1
//   blocks.i.attn.proj.weight   [D, D]     1
//   blocks.i.attn.proj.bias     [D]        replicated
//   blocks.i.ln2.weight/bias    [D]        replicated
//   blocks.i.mlp.fc.weight      [F, D]     0
//   blocks.i.mlp.fc.bias        [F]        0
//   blocks.i.mlp.proj.weight    [D, F]     1
//   blocks.i.mlp.proj.bias      [D]        replicated
//   ln_f.weight/bias            [D]        replicated
//   lm_head.weight              [V, D]     0   (untied only; padded like wte)

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

/// How the gpt's attention is computed (model/decoder_parts.hpp).
using GptAttentionKernel = AttentionKernel;

/// The model section of a GPT, validated.
struct GptOptions {
  std::int64_t vocab_size = 256;
  std::int64_t seq_len = 128;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t width = 128;
  double mlp_ratio = 4.0;
  bool tied_embeddings = true;
  double dropout = 0.0;
  /// model.attention: auto (scaled_dot_product where LibTorch has it) | explicit | sdpa
  GptAttentionKernel attention = GptAttentionKernel::kExplicit;
  Recompute recompute = Recompute::kNone;  ///< model.recompute: none | block | attention

  /// MLP hidden width, width * mlp_ratio. Local.
  std::int64_t mlp_width() const;
};

/// Reads model.{vocab_size, seq_len, layers, heads, width, mlp_ratio, tied_embeddings, dropout,
/// recompute}
/// and checks them for a tp group of `tp_size` ranks: heads % tp == 0, width % heads == 0,
/// width * mlp_ratio a whole number divisible by tp. Throws ConfigError naming the key. Local:
/// every rank runs it on the same config before any collective.
GptOptions read_gpt_options(ConfigSection& section, int tp_size);

/// The gpt's shape as the plan counts it (parameters, FLOPs per token, activation bytes): the
/// one description of its block that the model, `hpctrain plan`, the memory plan and the ledger
/// share. Local.
plan::TransformerShape gpt_shape(const GptOptions& options);

/// Causal self-attention with heads split across the tp group: QKV column-parallel (this rank's
/// heads), scores and softmax local to each head, output projection row-parallel.
class GptAttention : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0.attn"). Local.
  GptAttention(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
               std::uint64_t seed);
  /// x [B, T, D] (same on every tp rank) -> [B, T, D]; `mask` is the additive causal mask
  /// [T, T] (0 on and below the diagonal, -inf above) in x's dtype. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  /// Incremental decoding: x [B, t, D] of the positions after cache.length(); appends their keys
  /// and values as attention layer `layer` of `cache` and attends over every cached position;
  /// `mask` is KvCache::mask(t) [B, 1, t, length + t]. Collective over tp.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& mask, KvCache& cache,
                               std::int64_t layer);

  std::shared_ptr<parallel::ColumnParallelLinear> qkv;
  std::shared_ptr<parallel::RowParallelLinear> proj;
  /// The model whose int8 layers (Model::int8_linear) replace qkv and proj when set (compressed
  /// evaluation); set by Gpt, null for a block on its own.
  const Model* int8_owner = nullptr;

 private:
  std::int64_t local_heads_;
  std::int64_t head_dim_;
  double dropout_;
  GptAttentionKernel kernel_;
  bool recompute_;
};

/// The MLP: fc column-parallel (width -> F, tanh-GELU), proj row-parallel (F -> width).
class GptMlp : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0.mlp"). Local.
  GptMlp(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
         std::uint64_t seed);
  /// [B, T, D] -> [B, T, D]. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x);

  std::shared_ptr<parallel::ColumnParallelLinear> fc;
  std::shared_ptr<parallel::RowParallelLinear> proj;
  /// As GptAttention::int8_owner, for fc and proj.
  const Model* int8_owner = nullptr;
};

/// One pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
class GptBlock : public torch::nn::Module {
 public:
  /// `name` is the state_dict prefix ("blocks.0"). Local.
  GptBlock(const GptOptions& options, parallel::CommPtr tp, const std::string& name,
           std::uint64_t seed);
  /// [B, T, D] -> [B, T, D]. Collective over tp.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask);
  /// The block over the positions after cache.length() (GptAttention::forward_cached). Collective
  /// over tp.
  torch::Tensor forward_cached(const torch::Tensor& x, const torch::Tensor& mask, KvCache& cache,
                               std::int64_t layer);

  torch::nn::LayerNorm ln1{nullptr};
  std::shared_ptr<GptAttention> attn;
  torch::nn::LayerNorm ln2{nullptr};
  std::shared_ptr<GptMlp> mlp;

 private:
  double dropout_;
};

/// The GPT language model (see the top of this file); it decodes incrementally
/// (model/kv_cache.hpp).
class Gpt : public Model, public IncrementalDecoder {
 public:
  /// Builds the model for tp group `tp` (null or size 1: unsharded) with every weight drawn from
  /// (seed, parameter name), so any tp and any cut into stages start from the same logical
  /// weights. `pipeline`: the stages this rank holds (default: the whole model). `options` must
  /// have passed read_gpt_options for this tp size. Throws ConfigError when the pipeline has
  /// more stages than blocks. Local.
  Gpt(const GptOptions& options, parallel::CommPtr tp, std::uint64_t seed,
      const PipelinePart& pipeline = {});

  /// int64 tokens [B, T] (T <= seq_len, ids < vocab_size) -> this rank's vocabulary slice of
  /// the logits [B, T, ceil(vocab_size / tp)]. Columns past vocab_size (padding, last ranks
  /// only) are 0 and are ignored by loss(). The whole model only (forward_chunk for a stage).
  /// Collective over tp.
  torch::Tensor forward(const torch::Tensor& inputs) override;
  int pipeline_chunks() const override { return static_cast<int>(chunks_.size()); }
  /// The first stage takes tokens [B, T], the others the residual stream [B, T, width] (float32);
  /// the last returns the logits as forward() does. Collective over tp.
  torch::Tensor forward_chunk(int chunk, const torch::Tensor& input) override;
  /// [B, T, width] for tokens [B, T]. Local.
  std::vector<std::int64_t> stage_activation_shape(const torch::Tensor& inputs) const override;
  /// wte.weight on the first and the last stage with tied embeddings (the first stage's copy is
  /// the primary); nothing otherwise. Local.
  std::vector<StageCopy> stage_copies() const override;
  /// Blocks [first, end) of each of this rank's chunks. Local.
  std::pair<std::int64_t, std::int64_t> chunk_blocks(int chunk) const;
  /// Next-token loss of `outputs` (from forward) against int64 targets [B, T]: loss = mean over
  /// tokens, loss_sum, correct = top-1 hits, count = B * T. Identical on every tp rank, so
  /// metrics are reduced over the dp group only. Collective over tp.
  LossOutput loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  Task task() const override { return Task::kLanguageModel; }
  bool waits_for_parameters() const override { return true; }
  /// One unit per block (the embeddings, the final norm and the head form the root).
  std::vector<std::vector<std::string>> parameter_units() const override;
  /// Incremental decoding of the whole model (not a pipeline stage): a cache of every block's
  /// keys and values for this rank's heads. Local.
  std::unique_ptr<KvCache> make_kv_cache(std::int64_t batch, std::int64_t capacity,
                                         const torch::Tensor& padding) override;
  /// Logits of the positions after cache.length() (positions numbered after each row's padding,
  /// at most seq_len). Collective over tp.
  torch::Tensor forward_cached(const torch::Tensor& tokens, KvCache& cache) override;
  std::int64_t context_length() const override { return options_.seq_len; }
  /// The vocabulary slices gathered over tp, padding columns dropped. Collective over tp.
  torch::Tensor full_logits(const torch::Tensor& outputs) override;
  /// -vocab_parallel_cross_entropy: no rank holds the full logits. Collective over tp.
  torch::Tensor target_log_probs(const torch::Tensor& outputs,
                                 const torch::Tensor& targets) override;
  /// Per sequence of seq_len tokens: 2 * N * T + 2 * layers * T^2 * width, N = logical
  /// non-embedding parameters (everything but wte, wpe and lm_head); the output head and
  /// causal masking are not counted (Kaplan et al. 2020). Training costs about 3x. Local.
  double forward_flops_per_sample() const override;
  /// Logical shape and split of every parameter (table at the top of this file). Local.
  ShardInfo shard_info(const std::string& name) const override;

  /// Parameters replicated within the tp group (norms, row-parallel biases, positions). Local.
  std::vector<torch::Tensor> replicated_parameters() const;
  const GptOptions& options() const { return options_; }
  /// The tp group the model was built for (null for tp = 1 without a communicator). Local.
  const parallel::CommPtr& tp() const { return tp_; }

  /// Null on a pipeline stage without them: wte on the first stage (and, tied, the last), wpe on
  /// the first, ln_f and lm_head on the last.
  std::shared_ptr<parallel::VocabParallelEmbedding> wte;
  std::shared_ptr<torch::nn::Module> wpe;  ///< holds "weight" [seq_len, width]
  /// Holds this rank's blocks under their model-wide index ("blocks.5").
  std::shared_ptr<torch::nn::Module> blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  /// Untied output head: column-parallel [V, D] without bias or gather, vocabulary padded like
  /// wte; null when tied.
  std::shared_ptr<parallel::ColumnParallelLinear> lm_head;

 private:
  void add_shards(const std::string& prefix,
                  const std::vector<std::pair<std::string, parallel::TensorShard>>& shards);

  // One chunk of this rank (model/decoder_parts.hpp).
  using Chunk = DecoderChunk;
  torch::Tensor embed(const torch::Tensor& inputs);

  GptOptions options_;
  parallel::CommPtr tp_;
  PipelinePart pipeline_;
  std::vector<Chunk> chunks_;
  std::map<std::string, ShardInfo> shard_infos_;
  std::map<std::int64_t, std::shared_ptr<GptBlock>> blocks_;  // this rank's blocks by index
  torch::Tensor wpe_weight_;
  CausalMask causal_mask_;
};

/// Averages, over the tp group, the gradients of every parameter that `model` reports as
/// replicated (shard_info(name).split_dim == -1). Those gradients are already identical on every
/// tp rank in exact arithmetic and, with MPI and NCCL, bitwise (tests/mpi/parallel checks it); call
/// this after backward and before the optimizer step as a guard when a backend or kernel may
/// reduce in a rank-dependent order. Collective over tp (a no-op for tp = 1).
void sync_replicated_gradients(Model& model, comm::Communicator& tp);

}  // namespace hpctrain::model
