#pragma once
// Evaluation during training: the `eval` config section (shared with offline evaluation, which
// reads the same keys back from a checkpoint's config), and the schedule that decides when a
// training run evaluates and when early stopping ends it. The schedule owns that policy and its
// state (best metric so far, evaluations without improvement, an evaluation a stop interrupted);
// the training loop only asks it. docs/CONFIG.md documents the keys.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "hpctrain/runtime/task.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::eval {

struct EvalResult;

/// Which number judges a checkpoint.
enum class Metric { kLoss, kAccuracy, kPerplexity, kMse, kMae };

/// "loss", "accuracy", "perplexity", "mse", "mae". Local.
const char* metric_name(Metric metric);
/// Whether the metric improves upward (accuracy) or downward (loss, perplexity). Local.
bool higher_is_better(Metric metric);
/// The metric of a task when eval.metric is unset: accuracy for classification, loss otherwise
/// (the MSE for regression).
/// Local.
Metric default_metric(Task task);

/// The `eval` section. Defaults are declared here and nowhere else.
struct EvalConfig {
  static constexpr std::int64_t kDefaultBatchSize = 1000;

  std::int64_t every_steps = 0;                 ///< eval.every_steps: 0 = only at the end
  std::int64_t batch_size = kDefaultBatchSize;  ///< eval.batch_size: canonical batch (exactness)
  bool at_end = true;                           ///< eval.at_end: evaluate after the last step
  bool metric_set = false;                      ///< eval.metric given (else by task)
  Metric metric = Metric::kLoss;                ///< eval.metric, when metric_set
  std::int64_t patience = 0;     ///< eval.patience: early stopping after this many evals w/o gain
  std::int64_t max_samples = 0;  ///< eval.max_samples: 0 = the whole split

  /// The metric for a model of `task`. Local.
  Metric metric_for(Task task) const { return metric_set ? metric : default_metric(task); }
  /// Reads and validates the section (recording defaults); throws ConfigError naming the key.
  /// Local.
  static EvalConfig from(ConfigSection& section);
};

/// What early stopping and a resumed run need to know; saved in checkpoints (trainer state).
struct EvalProgress {
  double best_metric = 0;
  std::int64_t best_step = -1;
  std::int64_t evals_without_improvement = 0;
  /// The step whose evaluation a stop signal interrupted (-1: none): a resumed run evaluates it
  /// before its first step.
  std::int64_t interrupted_step = -1;
  /// Adds the fields to a trainer-state JSON object / reads them (absent: defaults). Local.
  void to_json(nlohmann::json& j) const;
  static EvalProgress from_json(const nlohmann::json& j);
};

class EvalSchedule {
 public:
  /// `has_data`: a validation split exists (else nothing is ever due). Local.
  EvalSchedule(const EvalConfig& config, bool has_data, Metric metric, EvalProgress progress);

  /// Whether to evaluate after `step` of `total_steps`. Local.
  bool due(std::int64_t step, std::int64_t total_steps) const;
  /// The interrupted evaluation a resumed run at `step` must run first. Local.
  bool owes(std::int64_t step) const { return progress_.interrupted_step == step && step >= 0; }
  /// Records a finished evaluation at `step`; true when early stopping ends the run (patience
  /// exhausted). Local (identical on every rank: the metrics are global).
  bool record(const EvalResult& result, std::int64_t step);
  /// Records that a stop signal interrupted the evaluation of `step`. Local.
  void interrupted(std::int64_t step) { progress_.interrupted_step = step; }
  /// "early stopping: accuracy did not improve for 3 evaluations (best 0.88 at step 400)". Local.
  std::string early_stop_reason() const;

  Metric metric() const { return metric_; }
  const EvalProgress& progress() const { return progress_; }

 private:
  EvalConfig config_;
  bool has_data_;
  Metric metric_;
  EvalProgress progress_;
};

}  // namespace hpctrain::eval
