#pragma once
// model.init_from for the llama family from a Hugging Face folder or safetensors file in Hugging
// Face's names (model/llama_hf.hpp has the table); init_model_from (init_from.hpp) calls it.

#include <string>

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/checkpoint/weights_file.hpp"
#include "hpctrain/model/llama.hpp"

namespace hpctrain::checkpoint {

/// Whether `file` names its tensors as Hugging Face's Llama-style models do
/// (model.embed_tokens.weight, model.layers.N.*). Local.
bool has_hf_llama_names(const WeightsFile& file);

/// Initialises this rank's parameters of a llama of `options` from `file`: every parameter's
/// tensors found with the logical shape (gate_up from gate_proj and up_proj), and every tensor of
/// the whole model (all pipeline stages) present; else one CheckpointError naming `key` lists
/// every missing or misshapen tensor and nothing is loaded. Tensors of the file no parameter uses
/// are named in one warning. A tied model checks that a file's lm_head equals the embedding; an
/// untied one whose file has no head starts its head as the embedding. Floating-point tensors
/// of any width are converted. Local.
InitFromReport init_llama_from_hf(model::Model& model, const model::LlamaOptions& options,
                                  const WeightsFile& file, int tp_rank, int tp_size,
                                  const std::string& key);

}  // namespace hpctrain::checkpoint
