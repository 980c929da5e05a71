#pragma once
// Multiple-choice evaluation of a language model (docs/EVAL.md, "Multiple choice"): every ending
// of an example is scored by the sum of its tokens' log-probabilities given the context and the
// ending's earlier tokens; the example counts as right when the right ending has the highest sum
// (accuracy) or the highest sum per token (length-normalised accuracy, accuracy_norm); ties go to
// the lowest index. A sequence longer than the model's context keeps its last tokens (the start
// of the context is dropped).
//
// Exact on any world size, like evaluate(): the examples are cut into canonical batches of
// `batch_size` examples that do not depend on the world size, data-parallel rank r takes a
// contiguous block of them (every example once), the counts are summed over the dp group.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpctrain::comm {
class ControlPlane;
}
namespace hpctrain::data {
struct ChoiceExample;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::eval {

struct ChoiceOptions {
  std::int64_t batch_size = 8;    ///< examples per canonical batch
  std::int64_t max_examples = 0;  ///< the first N only (0: all)
};

struct ChoiceResult {
  std::int64_t examples = 0;
  std::int64_t correct = 0;       ///< by the sum of log-probabilities
  std::int64_t correct_norm = 0;  ///< by the sum per token
  double accuracy = 0;
  double accuracy_norm = 0;
  double seconds = 0;  ///< slowest rank
  double examples_per_second = 0;
  /// The chosen ending of each example by sum and by sum per token (all examples, in order; the
  /// same on every rank).
  std::vector<std::int64_t> chosen;
  std::vector<std::int64_t> chosen_norm;
};

/// Scores `examples` with `model` (a language model; its forward over token windows). Runs in
/// inference mode, float32. Collective over the world (dp and tp groups).
ChoiceResult evaluate_multiple_choice(model::Model& model,
                                      const std::vector<data::ChoiceExample>& examples,
                                      comm::ControlPlane& dp, const ChoiceOptions& options);

/// {"examples", "correct", "accuracy", "correct_norm", "accuracy_norm", "seconds",
/// "examples_per_s"}: what metrics.jsonl and result files hold for a task. Local.
nlohmann::ordered_json choice_json(const ChoiceResult& r);

/// "accuracy 0.3100, accuracy_norm 0.3350 (200 examples)". Local.
std::string choice_text(const ChoiceResult& r);

}  // namespace hpctrain::eval
