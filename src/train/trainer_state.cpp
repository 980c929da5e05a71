#include <optional>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

nlohmann::json TrainerState::to_json() const {
  nlohmann::json j{{"step", step},
                   {"epoch", sampler.epoch},
                   {"offset_in_epoch", sampler.offset_in_epoch},
                   {"global_step", sampler.global_step},
                   {"consumed_samples", sampler.consumed_samples},
                   {"skipped_steps", skipped_steps}};
  eval.to_json(j);
  return j;
}

TrainerState TrainerState::from_json(const nlohmann::json& j) {
  // A manifest whose checksum was recomputed after an edit passes verification: every field is
  // checked here, and a bad one named (exit 4), instead of a JSON library message.
  auto field = [&j](const char* key, std::optional<std::int64_t> fallback) -> std::int64_t {
    if (!j.is_object()) {
      throw CheckpointError(
          "manifest.json: \"trainer_state\" should be an object: the "
          "checkpoint was not written by hpctrain train; resume from another");
    }
    if (!j.contains(key) && fallback) return *fallback;
    if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<std::int64_t>() < 0) {
      throw CheckpointError(
          str("manifest.json: trainer_state.", key,
              " should be a non-negative integer: the manifest was edited or "
              "was not written by hpctrain train; resume from another checkpoint"));
    }
    return j.at(key).get<std::int64_t>();
  };
  TrainerState s;
  s.step = field("step", std::nullopt);
  s.sampler.epoch = field("epoch", std::nullopt);
  s.sampler.offset_in_epoch = field("offset_in_epoch", std::nullopt);
  s.sampler.global_step = field("global_step", std::nullopt);
  s.sampler.consumed_samples = field("consumed_samples", std::nullopt);
  s.skipped_steps = field("skipped_steps", 0);
  if (j.contains("best_metric") && !j.at("best_metric").is_number()) {
    throw CheckpointError("manifest.json: trainer_state.best_metric should be a number");
  }
  field("evals_without_improvement", 0);
  if (j.contains("best_step") && !j.at("best_step").is_number_integer()) {
    throw CheckpointError("manifest.json: trainer_state.best_step should be an integer");
  }
  if (j.contains("interrupted_eval_step") && !j.at("interrupted_eval_step").is_number_integer()) {
    throw CheckpointError(
        "manifest.json: trainer_state.interrupted_eval_step should be an integer");
  }
  if (j.contains("optimizer_steps")) field("optimizer_steps", 0);
  s.eval = eval::EvalProgress::from_json(j);
  return s;
}

}  // namespace hpctrain::train
