#pragma once
// What hpctrain knows of a model family before it builds one. The rest of hpctrain (the model
// section's reader, build_model's checks, `hpctrain plan`, `hpctrain export`) asks these facts,
// never a family's name: a new family is one entry in the registry (src/model/model_registry.cpp)
// and changes no caller. A plugin's model (register_model) is a family with no facts: its task
// and its pipeline stages are read off the built model.

#include <cstdint>
#include <optional>
#include <string>

#include "hpctrain/model/recompute.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/task.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::model {

/// A decoder's section as `hpctrain plan` sizes it without building the model.
struct DecoderFacts {
  plan::TransformerShape shape;
  std::int64_t heads = 0;
  bool dropout = false;
  Recompute recompute = Recompute::kNone;
};

struct ModelFamily {
  std::string name;
  /// The task every model of the family learns; nullopt: model.task (a TorchScript module) or
  /// the built model's (a plugin's).
  std::optional<Task> task;
  /// A decoder-only transformer language model: model.seq_len and model.vocab_size, activation
  /// recomputation (model.recompute), pipeline stages, and `decoder_facts` for the plan.
  bool decoder = false;
  /// Built in and one stage: a pipeline is refused before the model is built (a plugin's model
  /// is asked once built: Model::pipeline_chunks()).
  bool single_stage = false;
  /// scripts/export_model.py rebuilds it in PyTorch from its state_dict (`hpctrain export
  /// --format torchscript | onnx`).
  bool rebuilt_by_export = false;
  /// Sets or checks the section's keys before any is read (the llama: a Hugging Face folder's
  /// config.json); nullptr: nothing to do.
  void (*prepare_section)(ConfigSection& section) = nullptr;
  /// The decoder's shape as its section and tp give it (decoders only). Throws ConfigError
  /// naming a bad key, as building would.
  DecoderFacts (*decoder_facts)(ConfigSection& section, int tp) = nullptr;
};

/// The family registered as model.name `name`: a built-in family's facts, a plugin's model (no
/// facts), or nullptr when no family of that name is registered (yet: its plugin may not be
/// loaded). Local.
const ModelFamily* find_model_family(const std::string& name);

}  // namespace hpctrain::model
