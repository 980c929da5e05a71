#include "hpctrain/eval/eval_schedule.hpp"

#include <nlohmann/json.hpp>

#include "hpctrain/eval/eval_tasks.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

const char* metric_name(Metric metric) {
  switch (metric) {
    case Metric::kLoss: return "loss";
    case Metric::kAccuracy: return "accuracy";
    case Metric::kPerplexity: return "perplexity";
    case Metric::kMse: return "mse";
    case Metric::kMae: return "mae";
  }
  return "loss";
}

bool higher_is_better(Metric metric) {
  return metric == Metric::kAccuracy;
}

Metric default_metric(Task task) {
  return task == Task::kClassification ? Metric::kAccuracy : Metric::kLoss;
}

EvalConfig EvalConfig::from(ConfigSection& s) {
  EvalConfig c;
  c.every_steps = s.get<std::int64_t>("every_steps", c.every_steps);
  c.batch_size = s.get<std::int64_t>("batch_size", c.batch_size);
  c.at_end = s.get<bool>("at_end", c.at_end);
  const std::string metric = s.get<std::string>("metric", "");
  c.patience = s.get<std::int64_t>("patience", c.patience);
  c.max_samples = s.get<std::int64_t>("max_samples", c.max_samples);
  if (c.every_steps < 0) s.fail("every_steps", "must be >= 0 (0: only at the end)");
  if (c.batch_size < 1) s.fail("batch_size", "must be at least 1");
  if (!metric.empty()) {
    s.check_choice("metric", metric, {"loss", "accuracy", "perplexity", "mse", "mae"});
    c.metric_set = true;
    c.metric = metric == "accuracy"     ? Metric::kAccuracy
               : metric == "perplexity" ? Metric::kPerplexity
               : metric == "mse"        ? Metric::kMse
               : metric == "mae"        ? Metric::kMae
                                        : Metric::kLoss;
  }
  if (c.patience < 0) s.fail("patience", "must be >= 0 (0: no early stopping)");
  if (c.max_samples < 0) s.fail("max_samples", "must be >= 0");
  read_eval_tasks(s);  // validated here; the trainer and offline evaluation read them again
  return c;
}

void EvalProgress::to_json(nlohmann::json& j) const {
  j["best_metric"] = best_metric;
  j["best_step"] = best_step;
  j["evals_without_improvement"] = evals_without_improvement;
  if (interrupted_step >= 0) j["interrupted_eval_step"] = interrupted_step;
}

EvalProgress EvalProgress::from_json(const nlohmann::json& j) {
  EvalProgress p;
  p.best_metric = j.value("best_metric", 0.0);
  p.best_step = j.value("best_step", std::int64_t{-1});
  p.evals_without_improvement = j.value("evals_without_improvement", std::int64_t{0});
  p.interrupted_step = j.value("interrupted_eval_step", std::int64_t{-1});
  return p;
}

EvalSchedule::EvalSchedule(const EvalConfig& config, bool has_data, Metric metric,
                           EvalProgress progress)
    : config_(config), has_data_(has_data), metric_(metric), progress_(progress) {}

bool EvalSchedule::due(std::int64_t step, std::int64_t total_steps) const {
  if (!has_data_) return false;
  return (config_.every_steps > 0 && step % config_.every_steps == 0) ||
         (config_.at_end && step == total_steps);
}

bool EvalSchedule::record(const EvalResult& result, std::int64_t step) {
  if (progress_.interrupted_step == step) progress_.interrupted_step = -1;
  const double value = result.metric(metric_name(metric_));
  const bool improved =
      progress_.best_step < 0 ||
      (higher_is_better(metric_) ? value > progress_.best_metric : value < progress_.best_metric);
  if (improved) {
    progress_.best_metric = value;
    progress_.best_step = step;
    progress_.evals_without_improvement = 0;
    return false;
  }
  ++progress_.evals_without_improvement;
  return config_.patience > 0 && progress_.evals_without_improvement >= config_.patience;
}

std::string EvalSchedule::early_stop_reason() const {
  return str("early stopping: ", metric_name(metric_), " did not improve for ", config_.patience,
             " evaluations (best ", progress_.best_metric, " at step ", progress_.best_step, ")");
}

}  // namespace hpctrain::eval
