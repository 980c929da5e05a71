#pragma once
// The llama family against Hugging Face's model folders (docs/MODELS.md, "Hugging Face
// folders"): config.json's keys against the model section's, and the tensor names of
// LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and MistralForCausalLM against the llama's.
//
//   config.json                        model section
//   architectures [X]                  architecture  (LlamaForCausalLM llama, Qwen2ForCausalLM
//                                                     qwen2, Qwen3ForCausalLM qwen3,
//                                                     MistralForCausalLM mistral)
//   vocab_size, num_hidden_layers      vocab_size, layers
//   hidden_size, intermediate_size     width, ffn_width
//   num_attention_heads                heads
//   num_key_value_heads                kv_heads      (absent: heads)
//   head_dim                           head_dim      (absent: hidden_size / heads)
//   max_position_embeddings            max_positions
//   rms_norm_eps, rope_theta           norm_eps, rope_theta
//   rope_scaling {rope_type: llama3,   rope_scaling: llama3, rope_factor, rope_low_freq_factor,
//     factor, low_freq_factor,           rope_high_freq_factor, rope_original_context
//     high_freq_factor, original_max_position_embeddings}
//   tie_word_embeddings                tied_embeddings
//   attention_bias / Qwen2             qkv_bias
//   Qwen3                              qk_norm
//
// Tensors (N a block; gate and up are the two halves of the stacked gate_up):
//   model.embed_tokens.weight                     wte.weight
//   model.layers.N.input_layernorm.weight         blocks.N.attn_norm.weight
//   model.layers.N.self_attn.{q,k,v}_proj.weight  blocks.N.attn.{q,k,v}.weight (and .bias)
//   model.layers.N.self_attn.{q,k}_norm.weight    blocks.N.attn.{q,k}_norm.weight
//   model.layers.N.self_attn.o_proj.weight        blocks.N.attn.o.weight
//   model.layers.N.post_attention_layernorm.weight  blocks.N.mlp_norm.weight
//   model.layers.N.mlp.gate_proj.weight           blocks.N.mlp.gate_up.weight [0]
//   model.layers.N.mlp.up_proj.weight             blocks.N.mlp.gate_up.weight [1]
//   model.layers.N.mlp.down_proj.weight           blocks.N.mlp.down.weight
//   model.norm.weight                             norm.weight
//   lm_head.weight                                lm_head.weight (untied; tied files may omit it)
//
// q and k: Hugging Face's files hold each head's rows in the order its rotary code expects,
// rotating the two halves of the head (dimension i with i + head_dim / 2), and so does the llama
// (model/llama.hpp), so they are taken as they are. (Meta's original consolidated checkpoints
// rotate adjacent pairs instead; the conversion to Hugging Face reorders them, and hpctrain reads
// the converted folders only.)

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpctrain/model/llama.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::model {

/// When model.init_from names a directory holding config.json (a Hugging Face model folder),
/// reads it and, for every key of the table above, sets the model section's key to the file's
/// value when the section lacks it (the resolved config records it) or checks it when present.
/// Throws ConfigError naming the key and both values when they disagree (exit 2), and
/// CheckpointError naming config.json and the field for an architecture that is not one of the
/// four, or settings the llama cannot express (another hidden_act, rope scaling other than
/// llama3, o/MLP biases, a sliding window shorter than model.seq_len) (exit 4). A missing
/// init_from, or a directory without config.json (an hpctrain checkpoint), is left alone. Local.
void apply_hf_config(ConfigSection& section);

/// The Hugging Face architecture name of `a` ("LlamaForCausalLM", ...). Local.
std::string hf_architecture_name(LlamaArchitecture a);

/// config.json of a model of `options` as Hugging Face's loaders read it (torch_dtype float32;
/// bos/eos token ids null: set your tokenizer's). Local.
nlohmann::json llama_hf_config(const LlamaOptions& options);

/// One parameter of the llama and the Hugging Face tensor(s) it is made of: one tensor of the same
/// shape, or (gate_up) two stacked along a new first dimension.
struct HfTensor {
  std::string name;                   ///< "blocks.0.mlp.gate_up.weight"
  std::vector<std::string> hf_names;  ///< {"model.layers.0.mlp.gate_proj.weight", "...up_proj..."}
};

/// Every parameter of a llama of `options` with its Hugging Face tensors, in Hugging Face's order
/// (lm_head.weight only when untied). Local.
std::vector<HfTensor> llama_hf_tensors(const LlamaOptions& options);

}  // namespace hpctrain::model
