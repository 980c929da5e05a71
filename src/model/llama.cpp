// The llama model: its config section, embedding, blocks, head, shard table and FLOP count.

#include "hpctrain/model/llama.hpp"

#include "hpctrain/model/llama_hf.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

std::string llama_architecture_name(LlamaArchitecture a) {
  switch (a) {
    case LlamaArchitecture::kLlama: return "llama";
    case LlamaArchitecture::kQwen2: return "qwen2";
    case LlamaArchitecture::kQwen3: return "qwen3";
    case LlamaArchitecture::kMistral: return "mistral";
  }
  return "llama";
}

namespace {

void read_rope(ConfigSection& section, LlamaOptions& o) {
  o.rope_theta = section.get<double>("rope_theta", o.rope_theta);
  const std::string scaling = section.get<std::string>("rope_scaling", "none");
  section.check_choice("rope_scaling", scaling, {"none", "llama3"});
  o.rope.llama3 = scaling == "llama3";
  if (o.rope.llama3) {
    o.rope.factor = section.get<double>("rope_factor", o.rope.factor);
    o.rope.low_freq_factor = section.get<double>("rope_low_freq_factor", o.rope.low_freq_factor);
    o.rope.high_freq_factor = section.get<double>("rope_high_freq_factor", o.rope.high_freq_factor);
    o.rope.original_context =
        section.get<std::int64_t>("rope_original_context", o.rope.original_context);
    if (!(o.rope.factor >= 1)) section.fail("rope_factor", "must be >= 1");
    if (!(o.rope.low_freq_factor > 0)) section.fail("rope_low_freq_factor", "must be positive");
    if (!(o.rope.high_freq_factor > o.rope.low_freq_factor)) {
      section.fail("rope_high_freq_factor", "must be larger than model.rope_low_freq_factor");
    }
    if (o.rope.original_context < 1) section.fail("rope_original_context", "must be positive");
  }
  if (!(o.rope_theta > 1)) section.fail("rope_theta", "must be larger than 1");
}

void check_llama_sizes(ConfigSection& section, const LlamaOptions& o, int tp) {
  if (o.vocab_size < 2) section.fail("vocab_size", "must be at least 2");
  if (o.seq_len < 1) section.fail("seq_len", "must be positive");
  if (o.layers < 1) section.fail("layers", "must be positive");
  if (o.width < 1) section.fail("width", "must be positive");
  if (o.heads < 1) section.fail("heads", "must be positive");
  if (o.kv_heads < 1 || o.heads % o.kv_heads != 0) {
    section.fail("kv_heads", str("must divide model.heads = ", o.heads,
                                 " (query heads share key/value heads in equal groups)"));
  }
  if (o.head_dim < 2 || o.head_dim % 2 != 0) {
    section.fail("head_dim", "must be even and positive (the rotary embedding turns pairs)");
  }
  if (o.ffn_width < 1) section.fail("ffn_width", "must be positive");
  if (!(o.norm_eps > 0)) section.fail("norm_eps", "must be positive");
  if (o.max_positions < o.seq_len) {
    section.fail("max_positions", str("is smaller than model.seq_len = ", o.seq_len,
                                      ": raise it or shorten seq_len"));
  }
  if (tp < 1) throw ConfigError(str("llama: tensor-parallel size ", tp, " must be >= 1"));
  if (o.heads % tp != 0) {
    section.fail("heads", str("must be divisible by the tensor-parallel size tp = ", tp,
                              " (each tp rank computes heads / tp whole query heads)"));
  }
  if (o.ffn_width % tp != 0) {
    section.fail("ffn_width", str("must be divisible by the tensor-parallel size tp = ", tp,
                                  "; change it or tp"));
  }
}

}  // namespace

LlamaOptions read_llama_options(ConfigSection& section, int tp_size) {
  apply_hf_config(section);
  LlamaOptions o;
  o.architecture =
      section.get_choice<LlamaArchitecture>("architecture", o.architecture,
                                            {{"llama", LlamaArchitecture::kLlama},
                                             {"qwen2", LlamaArchitecture::kQwen2},
                                             {"qwen3", LlamaArchitecture::kQwen3},
                                             {"mistral", LlamaArchitecture::kMistral}});
  o.vocab_size = section.get<std::int64_t>("vocab_size", o.vocab_size);
  o.seq_len = section.get<std::int64_t>("seq_len", o.seq_len);
  o.layers = section.get<std::int64_t>("layers", o.layers);
  o.width = section.get<std::int64_t>("width", o.width);
  o.heads = section.get<std::int64_t>("heads", o.heads);
  if (o.heads < 1) section.fail("heads", "must be positive");
  o.kv_heads = section.get<std::int64_t>("kv_heads", o.heads);
  o.head_dim = section.get<std::int64_t>("head_dim", o.width / o.heads);
  o.ffn_width = section.get<std::int64_t>("ffn_width", 3 * o.width);
  o.max_positions = section.get<std::int64_t>("max_positions", o.seq_len);
  o.norm_eps = section.get<double>("norm_eps", o.norm_eps);
  read_rope(section, o);
  o.qkv_bias = section.get<bool>("qkv_bias", o.architecture == LlamaArchitecture::kQwen2);
  o.qk_norm = section.get<bool>("qk_norm", o.architecture == LlamaArchitecture::kQwen3);
  o.tied_embeddings = section.get<bool>("tied_embeddings", o.tied_embeddings);
  o.init_std = section.get<double>("init_std", o.init_std);
  if (!(o.init_std > 0)) section.fail("init_std", "must be positive");
  o.attention = read_attention_kernel(section);
  o.recompute = section.get_choice<Recompute>("recompute", o.recompute,
                                              {{"none", Recompute::kNone},
                                               {"block", Recompute::kBlock},
                                               {"attention", Recompute::kAttention}});
  check_llama_sizes(section, o, tp_size);
  return o;
}

Llama::Llama(const LlamaOptions& options, parallel::CommPtr tp, std::uint64_t seed,
             const PipelinePart& pipeline)
    : options_(options),
      tp_(std::move(tp)),
      pipeline_(pipeline),
      chunks_(decoder_chunks(pipeline, options.layers)),
      rope_(std::make_shared<RotaryTable>(options)) {
  const bool embeds = chunks_.front().embeds;
  const bool heads = chunks_.back().heads;
  // Registration order is the whole model's (wte, blocks, norm, lm_head), restricted to what this
  // rank holds; the last stage's copy of a tied wte comes first like the original.
  if (embeds || (heads && options.tied_embeddings)) {
    wte = register_module(
        "wte", std::make_shared<parallel::VocabParallelEmbedding>(
                   options.vocab_size, options.width, tp_, "wte", seed, options.init_std));
    add_shards("wte", wte->shards());
  }
  blocks = register_module("blocks", std::make_shared<torch::nn::Module>());
  for (const DecoderChunk& chunk : chunks_) {
    for (std::int64_t i = chunk.first; i < chunk.end; ++i) {
      const std::string prefix = str("blocks.", i);
      auto block = std::make_shared<LlamaBlock>(options, tp_, prefix, seed, rope_);
      block->attn->int8_owner = this;
      block->mlp->int8_owner = this;
      blocks->register_module(std::to_string(i), block);
      add_shards(prefix, block->shards());
      blocks_[i] = std::move(block);
    }
  }
  if (heads)
    norm = register_module("norm", std::make_shared<RmsNorm>(options.width, options.norm_eps));
  if (heads && !options.tied_embeddings) {
    lm_head = register_module(
        "lm_head", std::make_shared<parallel::ColumnParallelLinear>(
                       parallel::ColumnParallelLinearOptions(options.width, options.vocab_size)
                           .bias(false)
                           .pad_outputs(true)
                           .init_std(options.init_std),
                       tp_, "lm_head", seed));
    add_shards("lm_head", lm_head->shards());
  }
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (shard_infos_.count(item.key()) == 0) {
      shard_infos_[item.key()] = ShardInfo{item.value().sizes().vec(), -1};
    }
  }
}

void Llama::add_shards(const std::string& prefix,
                       const std::vector<std::pair<std::string, parallel::TensorShard>>& shards) {
  for (const auto& [name, shard] : shards) {
    shard_infos_[prefix + "." + name] = ShardInfo{shard.logical_shape, shard.split_dim};
  }
}

std::vector<StageCopy> Llama::stage_copies() const {
  return tied_embedding_copies(pipeline_, chunks_, options_.tied_embeddings);
}

std::vector<std::int64_t> Llama::stage_activation_shape(const torch::Tensor& inputs) const {
  return {inputs.size(0), inputs.size(1), options_.width};
}

torch::Tensor Llama::forward(const torch::Tensor& inputs) {
  if (pipeline_.cut()) {
    throw Error(str("llama: forward() of a model cut into ", pipeline_.stages(),
                    " pipeline stages: run its stages with forward_chunk (internal error)"));
  }
  return forward_chunk(0, inputs);
}

torch::Tensor Llama::forward_chunk(int chunk_index, const torch::Tensor& input) {
  if (chunk_index < 0 || chunk_index >= pipeline_chunks()) {
    throw Error(str("llama: chunk ", chunk_index, " of ", pipeline_chunks(), " (internal error)"));
  }
  const DecoderChunk& chunk = chunks_[static_cast<std::size_t>(chunk_index)];
  torch::Tensor x;
  if (chunk.embeds) {
    check_token_batch(input, options_.seq_len, options_.vocab_size, "llama");
    wait_for_parameters(*wte);
    x = wte->forward(input);
  } else {
    if (input.dim() != 3 || input.size(2) != options_.width || input.size(1) > options_.seq_len) {
      throw Error(str("llama: stage ", chunk.stage, " got activations ", input.sizes(),
                      ", expected [batch, seq <= ", options_.seq_len, ", ", options_.width,
                      "] (internal error)"));
    }
    x = input;
  }
  const torch::Tensor mask = causal_mask_.get(x, options_.seq_len, x.size(1));
  for (std::int64_t i = chunk.first; i < chunk.end; ++i) {
    const auto& block = blocks_.at(i);
    wait_for_parameters(*block);
    const auto unit = static_cast<std::size_t>(i);
    x = enter_unit(unit, x);
    if (options_.recompute == Recompute::kBlock && is_training()) {
      auto* b = block.get();
      x = recompute(
          [b, mask](const std::vector<torch::Tensor>& in) { return b->forward(in[0], mask); }, {x});
    } else {
      x = block->forward(x, mask);
    }
    x = leave_unit(unit, x);
  }
  if (!chunk.heads) return x;
  wait_for_parameters(*norm);
  x = norm->forward(x);
  wait_for_parameters(options_.tied_embeddings ? static_cast<torch::nn::Module&>(*wte) : *lm_head);
  return options_.tied_embeddings ? wte->logits(x) : int8_or_float(this, *lm_head, x);
}

LossOutput Llama::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return language_model_loss(outputs, targets, tp_, options_.vocab_size, "llama");
}

std::vector<std::vector<std::string>> Llama::parameter_units() const {
  std::vector<const torch::nn::Module*> modules;
  for (const auto& chunk : chunks_) {
    for (std::int64_t i = chunk.first; i < chunk.end; ++i) modules.push_back(blocks_.at(i).get());
  }
  return units_of(modules);
}

plan::TransformerShape llama_shape(const LlamaOptions& o) {
  plan::TransformerShape s;
  s.layers = o.layers;
  s.width = o.width;
  s.seq_len = o.seq_len;
  s.vocab_size = o.vocab_size;
  s.tied_embeddings = o.tied_embeddings;
  s.heads = o.heads;
  s.kv_heads = o.kv_heads;
  s.head_dim = o.head_dim;
  s.ffn_width = o.ffn_width;
  s.swiglu = true;
  s.qkv_bias = o.qkv_bias;
  s.qk_norm = o.qk_norm;
  return s;
}

double Llama::forward_flops_per_sample() const {
  const plan::TransformerShape shape = llama_shape(options_);
  return static_cast<double>(options_.seq_len) * plan::transformer_forward_flops_per_token(shape);
}

ShardInfo Llama::shard_info(const std::string& name) const {
  auto it = shard_infos_.find(name);
  if (it != shard_infos_.end()) return it->second;
  return Model::shard_info(name);
}

std::shared_ptr<Model> make_llama(ConfigSection& section, const ModelContext& ctx) {
  LlamaOptions options = read_llama_options(section, ctx.tp_size);
  if (ctx.tp_size > 1 &&
      (!ctx.tp || ctx.tp->size() != ctx.tp_size || ctx.tp->rank() != ctx.tp_rank)) {
    throw Error(str("llama: the model context says tp rank ", ctx.tp_rank, " of ", ctx.tp_size,
                    " but its tp communicator is ",
                    ctx.tp ? str("rank ", ctx.tp->rank(), " of ", ctx.tp->size()) : "missing",
                    "; build ModelContext from the process grid's tp group"));
  }
  if (ctx.tp_size > 1 && !options.kv_split(ctx.tp_size)) {
    log::info(str("model.kv_heads = ", options.kv_heads,
                  " is not divisible by parallel.tp = ", ctx.tp_size,
                  ": the k and v projections are replicated on every tp rank (each computes all ",
                  options.kv_heads,
                  " key/value heads and uses those its query heads read); their gradients are "
                  "summed over the tp group"));
  }
  return std::make_shared<Llama>(options, ctx.tp_size > 1 ? ctx.tp : nullptr, ctx.seed,
                                 ctx.pipeline);
}

}  // namespace hpctrain::model
