// The GPT model: embeddings, blocks, head, its config section, shard table and FLOP count.

#include "hpctrain/model/gpt.hpp"

#include <cmath>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

std::int64_t GptOptions::mlp_width() const {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(width) * mlp_ratio));
}

GptOptions read_gpt_options(ConfigSection& section, int tp_size) {
  GptOptions o;
  o.vocab_size = section.get<std::int64_t>("vocab_size", o.vocab_size);
  o.seq_len = section.get<std::int64_t>("seq_len", o.seq_len);
  o.layers = section.get<std::int64_t>("layers", o.layers);
  o.heads = section.get<std::int64_t>("heads", o.heads);
  o.width = section.get<std::int64_t>("width", o.width);
  o.mlp_ratio = section.get<double>("mlp_ratio", o.mlp_ratio);
  o.tied_embeddings = section.get<bool>("tied_embeddings", o.tied_embeddings);
  o.dropout = section.get<double>("dropout", o.dropout);
  o.attention = read_attention_kernel(section);
  o.recompute = section.get_choice<Recompute>("recompute", o.recompute,
                                              {{"none", Recompute::kNone},
                                               {"block", Recompute::kBlock},
                                               {"attention", Recompute::kAttention}});
  if (o.vocab_size < 2) section.fail("vocab_size", "must be at least 2 (256 for byte-level text)");
  if (o.seq_len < 1) section.fail("seq_len", "must be positive");
  if (o.layers < 1) section.fail("layers", "must be positive");
  if (o.heads < 1) section.fail("heads", "must be positive");
  if (o.width < 1) section.fail("width", "must be positive");
  if (!(o.mlp_ratio > 0)) section.fail("mlp_ratio", "must be positive");
  if (o.dropout < 0 || o.dropout >= 1) section.fail("dropout", "must be in [0, 1)");
  if (tp_size < 1) throw ConfigError(str("gpt: tensor-parallel size ", tp_size, " must be >= 1"));
  // The tp check comes first: with heads = 3 on tp = 2, the fix is a head count that tp divides,
  // which then usually divides the width too.
  if (o.heads % tp_size != 0) {
    section.fail("heads", str("must be divisible by the tensor-parallel size tp = ", tp_size,
                              " (each tp rank computes heads / tp whole heads); use a multiple "
                              "of ",
                              tp_size, " heads or a tp that divides ", o.heads));
  }
  if (o.width % o.heads != 0) {
    section.fail("width", str("must be divisible by model.heads = ", o.heads,
                              " (each head has width / heads dimensions)"));
  }
  const double mlp = static_cast<double>(o.width) * o.mlp_ratio;
  if (std::fabs(mlp - std::round(mlp)) > 1e-9) {
    section.fail("mlp_ratio",
                 str("width * mlp_ratio = ", mlp, " must be a whole number of MLP features"));
  }
  if (o.mlp_width() % tp_size != 0) {
    section.fail("mlp_ratio", str("width * mlp_ratio = ", o.mlp_width(),
                                  " MLP features must be divisible by "
                                  "the tensor-parallel size tp = ",
                                  tp_size, "; change mlp_ratio or tp"));
  }
  return o;
}

Gpt::Gpt(const GptOptions& options, parallel::CommPtr tp, std::uint64_t seed,
         const PipelinePart& pipeline)
    : options_(options), tp_(std::move(tp)), pipeline_(pipeline) {
  const std::int64_t d = options.width;
  chunks_ = decoder_chunks(pipeline, options.layers);
  const bool embeds = chunks_.front().embeds;
  const bool heads = chunks_.back().heads;
  // Registration order is the whole model's (wte, wpe, blocks, ln_f, lm_head), restricted to
  // what this rank holds; the last stage's copy of a tied wte comes first like the original.
  if (embeds || (heads && options.tied_embeddings)) {
    wte = register_module("wte", std::make_shared<parallel::VocabParallelEmbedding>(
                                     options.vocab_size, d, tp_, "wte", seed));
    add_shards("wte", wte->shards());
  }
  if (embeds) {
    wpe = register_module("wpe", std::make_shared<torch::nn::Module>());
    wpe_weight_ = wpe->register_parameter(
        "weight", parallel::init_normal_shard(
                      seed, "wpe.weight", parallel::TensorShard{{options.seq_len, d}}, 0.02, 0, 1));
  }
  blocks = register_module("blocks", std::make_shared<torch::nn::Module>());
  for (const Chunk& chunk : chunks_) {
    for (std::int64_t i = chunk.first; i < chunk.end; ++i) {
      const std::string prefix = str("blocks.", i);
      auto block = std::make_shared<GptBlock>(options, tp_, prefix, seed);
      block->attn->int8_owner = this;
      block->mlp->int8_owner = this;
      blocks->register_module(std::to_string(i), block);
      add_shards(prefix + ".attn.qkv", block->attn->qkv->shards());
      add_shards(prefix + ".attn.proj", block->attn->proj->shards());
      add_shards(prefix + ".mlp.fc", block->mlp->fc->shards());
      add_shards(prefix + ".mlp.proj", block->mlp->proj->shards());
      blocks_[i] = std::move(block);
    }
  }
  if (heads) {
    ln_f =
        register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5)));
  }
  if (heads && !options.tied_embeddings) {
    lm_head =
        register_module("lm_head", std::make_shared<parallel::ColumnParallelLinear>(
                                       parallel::ColumnParallelLinearOptions(d, options.vocab_size)
                                           .bias(false)
                                           .pad_outputs(true),
                                       tp_, "lm_head", seed));
    add_shards("lm_head", lm_head->shards());
  }
  // Everything not sharded above is replicated: record it too, so shard_info is one lookup.
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (shard_infos_.count(item.key()) == 0) {
      shard_infos_[item.key()] = ShardInfo{item.value().sizes().vec(), -1};
    }
  }
}

std::pair<std::int64_t, std::int64_t> Gpt::chunk_blocks(int chunk) const {
  const Chunk& c = chunks_.at(static_cast<std::size_t>(chunk));
  return {c.first, c.end};
}

std::vector<StageCopy> Gpt::stage_copies() const {
  return tied_embedding_copies(pipeline_, chunks_, options_.tied_embeddings);
}

std::vector<std::int64_t> Gpt::stage_activation_shape(const torch::Tensor& inputs) const {
  return {inputs.size(0), inputs.size(1), options_.width};
}

void Gpt::add_shards(const std::string& prefix,
                     const std::vector<std::pair<std::string, parallel::TensorShard>>& shards) {
  for (const auto& [name, shard] : shards) {
    shard_infos_[prefix + "." + name] = ShardInfo{shard.logical_shape, shard.split_dim};
  }
}

torch::Tensor Gpt::embed(const torch::Tensor& inputs) {
  check_token_batch(inputs, options_.seq_len, options_.vocab_size, "gpt");
  const std::int64_t t = inputs.size(1);
  // Layer by layer, each group's parameters are waited for just before their first use (a
  // sharded optimizer's all-gather may still be filling the later ones).
  wait_for_parameters(*wte);
  wait_for_parameters(*wpe);
  torch::Tensor x = torch::add(wte->forward(inputs), wpe_weight_.narrow(0, 0, t));
  if (options_.dropout > 0) x = torch::dropout(x, options_.dropout, is_training());
  return x;
}

torch::Tensor Gpt::forward(const torch::Tensor& inputs) {
  if (pipeline_.cut()) {
    throw Error(str("gpt: forward() of a model cut into ", pipeline_.stages(),
                    " pipeline stages: run its stages with forward_chunk (internal error)"));
  }
  return forward_chunk(0, inputs);
}

torch::Tensor Gpt::forward_chunk(int chunk_index, const torch::Tensor& input) {
  if (chunk_index < 0 || chunk_index >= pipeline_chunks()) {
    throw Error(str("gpt: chunk ", chunk_index, " of ", pipeline_chunks(), " (internal error)"));
  }
  const Chunk& chunk = chunks_[static_cast<std::size_t>(chunk_index)];
  torch::Tensor x;
  if (chunk.embeds) {
    x = embed(input);
  } else {
    if (input.dim() != 3 || input.size(2) != options_.width || input.size(1) > options_.seq_len) {
      throw Error(str("gpt: stage ", chunk.stage, " got activations ", input.sizes(),
                      ", expected [batch, seq <= ", options_.seq_len, ", ", options_.width,
                      "] (internal error)"));
    }
    x = input;
  }
  const std::int64_t t = x.size(1);
  const torch::Tensor mask = causal_mask_.get(x, options_.seq_len, t);
  for (std::int64_t i = chunk.first; i < chunk.end; ++i) {
    const auto& block = blocks_.at(i);
    wait_for_parameters(*block);
    const auto unit = static_cast<std::size_t>(i);
    x = enter_unit(unit, x);
    if (options_.recompute == Recompute::kBlock && is_training()) {
      // Only the block's input stays for backward; the block runs again there.
      auto* b = block.get();
      x = recompute(
          [b, mask](const std::vector<torch::Tensor>& in) { return b->forward(in[0], mask); }, {x});
    } else {
      x = block->forward(x, mask);
    }
    x = leave_unit(unit, x);
  }
  if (!chunk.heads) return x;
  wait_for_parameters(*ln_f);
  x = ln_f->forward(x);
  if (lm_head) wait_for_parameters(*lm_head);
  return options_.tied_embeddings ? wte->logits(x) : int8_or_float(this, *lm_head, x);
}

LossOutput Gpt::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return language_model_loss(outputs, targets, tp_, options_.vocab_size, "gpt");
}

std::vector<std::vector<std::string>> Gpt::parameter_units() const {
  std::vector<const torch::nn::Module*> modules;
  for (const auto& chunk : chunks_) {
    for (std::int64_t i = chunk.first; i < chunk.end; ++i) modules.push_back(blocks_.at(i).get());
  }
  return units_of(modules);
}

plan::TransformerShape gpt_shape(const GptOptions& o) {
  return plan::TransformerShape{o.layers,     o.width,     o.seq_len,
                                o.vocab_size, o.mlp_ratio, o.tied_embeddings};
}

double Gpt::forward_flops_per_sample() const {
  // The whole model's at any pipeline cut, the output head's logits included: the plan's count
  // (gpt_unit_test and plan_model_unit_test check it against the built parameters).
  return static_cast<double>(options_.seq_len) *
         plan::transformer_forward_flops_per_token(gpt_shape(options_));
}

ShardInfo Gpt::shard_info(const std::string& name) const {
  auto it = shard_infos_.find(name);
  if (it != shard_infos_.end()) return it->second;
  return Model::shard_info(name);
}

std::vector<torch::Tensor> Gpt::replicated_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (shard_info(item.key()).split_dim < 0) out.push_back(item.value());
  }
  return out;
}

void sync_replicated_gradients(Model& model, comm::Communicator& tp) {
  if (tp.size() == 1) return;
  std::vector<torch::Tensor> replicated;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (model.shard_info(item.key()).split_dim < 0) replicated.push_back(item.value());
  }
  parallel::average_gradients(replicated, tp);
}

std::shared_ptr<Model> make_gpt(ConfigSection& section, const ModelContext& ctx) {
  GptOptions options = read_gpt_options(section, ctx.tp_size);
  if (ctx.tp_size > 1 &&
      (!ctx.tp || ctx.tp->size() != ctx.tp_size || ctx.tp->rank() != ctx.tp_rank)) {
    throw Error(str("gpt: the model context says tp rank ", ctx.tp_rank, " of ", ctx.tp_size,
                    " but its tp communicator is ",
                    ctx.tp ? str("rank ", ctx.tp->rank(), " of ", ctx.tp->size()) : "missing",
                    "; build ModelContext from the process grid's tp group"));
  }
  return std::make_shared<Gpt>(options, ctx.tp_size > 1 ? ctx.tp : nullptr, ctx.seed, ctx.pipeline);
}

}  // namespace hpctrain::model
