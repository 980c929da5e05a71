#pragma once
// Starting a model from pretrained weights (model.init_from; docs/MODELS.md, "Pretrained
// weights"): every parameter from a checkpoint, safetensors file or torch.save state_dict
// (checkpoint/weights_file.hpp), names mapped, shapes checked, dtypes converted, and each rank's
// tensor-parallel slab cut at load. Only parameters (and the buffers the file holds) change: the
// optimizer state, the step and the sample position are the caller's (a fresh run: all zero).

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::model {
class Model;
}

namespace hpctrain::checkpoint {

/// What init_model_from did, for the log.
struct InitFromReport {
  std::string source;              ///< the file, its format and naming ("GPT-2 names")
  std::int64_t parameters = 0;     ///< parameters initialised
  std::int64_t buffers = 0;        ///< buffers loaded from the file
  std::vector<std::string> notes;  ///< padding, cropping, the tied head, skipped tensors
  /// Things the user should look at: tensors of a Hugging Face folder that no parameter uses
  /// (named in one line). Logged as warnings.
  std::vector<std::string> warnings;
};

/// Initialises every parameter of `model` from the weights at `path`. Names are the model's own
/// state_dict names; a llama also takes Hugging Face's names (model/llama_hf.hpp: LlamaForCausalLM
/// and its kin, gate and up stacked into gate_up) from a folder or safetensors file, where a
/// tensor no parameter uses is a warning naming it, not an error, and the whole model's tensors
/// (every pipeline stage's) are expected; a gpt also takes GPT-2's Hugging Face names
/// (model/gpt2_names.hpp), with the Conv1D weights transposed (or not, for files that store them as
/// nn.Linear does), and an optional "module." or "_orig_mod." prefix is dropped. Every parameter
/// must be found with its logical shape and every tensor of the file must map to one (GPT-2's
/// attention-mask buffers aside); otherwise nothing is loaded and one CheckpointError lists every
/// missing, unexpected and mis-shaped tensor, naming `key` (the config key, "model.init_from"). A
/// gpt's vocabulary tables (wte, an untied lm_head) with fewer rows than model.vocab_size are
/// padded with zero rows, and a position table with more rows than model.seq_len keeps its first
/// seq_len rows (both reported in the notes); an untied lm_head missing from a file that ties it is
/// a copy of wte, and a tied gpt checks that the file's lm_head, if present, equals its wte.
/// Floating-point tensors of any width (f16, bf16, f32, f64) are converted to each parameter's
/// dtype. This rank keeps its slab of each parameter (tp rank `tp_rank` of `tp_size`, the model's
/// shard_info). Buffers the file holds are loaded too; the others keep their values. Local: every
/// rank reads the file itself, no collective; every rank finds the same problems.
InitFromReport init_model_from(model::Model& model, const std::string& path, int tp_rank,
                               int tp_size, const std::string& key = "model.init_from");

}  // namespace hpctrain::checkpoint
