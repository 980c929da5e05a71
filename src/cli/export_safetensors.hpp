#pragma once
// `hpctrain export --format safetensors`: a model's weights as a model folder that Hugging
// Face-style loaders read (docs/MODELS.md, "Pretrained weights").

#include <string>

#include "hpctrain/model/model.hpp"

namespace hpctrain::cli {

/// Writes the folder `out_dir`: the weights as model.safetensors or, past `max_shard_bytes`,
/// model-0000i-of-0000N.safetensors shards with model.safetensors.index.json (Hugging Face's
/// rule: tensors in order, a new shard when the next would pass the limit), and config.json.
/// A gpt under GPT-2's Hugging Face names and layouts (model/gpt2_names.hpp: Conv1D weights
/// transposed, qkv as c_attn, lm_head.weight only when untied) with GPT-2's config.json; a llama
/// under its Hugging Face architecture's names (model/llama_hf.hpp) with its config.json and a
/// generation_config.json; any other model's parameters and buffers under its own state_dict
/// names, without config.json. `model` holds logical tensors (tp = 1);
/// `checkpoint` and `step` go into the file's metadata. The folder is written beside its final
/// name and renamed; an existing folder is replaced only when it holds nothing but such files.
/// Returns what was written, for the log. Throws ConfigError (the folder) or CheckpointError (the
/// write). Local.
std::string export_safetensors(model::Model& model, const std::string& out_dir,
                               const std::string& checkpoint, std::int64_t step,
                               std::int64_t max_shard_bytes);

}  // namespace hpctrain::cli
