#pragma once
// Exact distributed evaluation (docs/ARCHITECTURE.md, invariant 5). The evaluation set is cut into
// canonical batches [i*B, (i+1)*B) that do not depend on the world size; data-parallel rank r
// evaluates a contiguous block of them (every sample exactly once, no padding, uneven counts
// allowed). Each batch's loss sum, correct count and sample count land in their own slot of a
// per-batch table that is all-reduced (every slot has exactly one non-zero contributor, so the sum
// is exact) and then summed in batch order in double precision. The same weights therefore give
// bit-identical metrics on 1, 2 or 64 ranks, and offline evaluation reproduces the periodic one.

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/runtime/precision.hpp"
#include "hpctrain/runtime/task.hpp"

namespace at {
class Tensor;
}
namespace hpctrain::comm {
class ControlPlane;
}
namespace hpctrain::data {
class Dataset;
}
namespace hpctrain::model {
class Model;
struct LossOutput;
}  // namespace hpctrain::model

namespace hpctrain::eval {

struct EvalOptions {
  /// Canonical batch size (metrics are exact for a given one).
  std::int64_t batch_size = EvalConfig::kDefaultBatchSize;
  /// Autocast of the forward pass: bf16 on CPU and CUDA, fp16 on CUDA only (float32 on CPU).
  Precision precision = Precision::kFp32;
  std::int64_t max_samples = 0;  ///< evaluate only the first max_samples (0 = all)
  /// Batches read ahead by a background thread (0: read inline). Metrics do not depend on it.
  int prefetch = 0;
  /// Called before every batch slot (also on ranks with no batch left) with a flag this rank
  /// wants to stop; returns true when any rank of the job wants to. Collective when set.
  std::function<bool()> stop_check;
  /// Called on this rank with the index of each of its batches' first sample and the model's
  /// outputs for the batch (as forward returned them), in batch order. Local when set.
  std::function<void(std::int64_t first_sample, const at::Tensor& outputs)> on_outputs;
  /// Replaces the model's forward and loss for one batch (inputs and targets on the model's
  /// device) and returns its metric sums, the same on every rank that evaluates the batch: a
  /// model cut into pipeline stages runs each batch through a forward-only schedule. Runs in
  /// inference mode; autocast is its own business (`precision` above says which). on_outputs is not
  /// called with it. Collective as the function is, when set.
  std::function<model::LossOutput(const at::Tensor& inputs, const at::Tensor& targets)>
      forward_loss;
};

struct EvalResult {
  Task task = Task::kClassification;
  std::int64_t samples = 0;  ///< samples (sequences) evaluated
  std::int64_t count = 0;    ///< predictions scored: samples, or tokens for language models
  double loss = 0;           ///< mean loss per prediction
  double accuracy = 0;       ///< top-1 accuracy (token accuracy for language models)
  double perplexity = 0;     ///< exp(loss) for language models, 0 otherwise
  double mae = 0;      ///< mean absolute error per target element (regression; loss is the MSE)
  double seconds = 0;  ///< wall time of the evaluation (slowest rank)
  double data_wait_seconds = 0;  ///< time spent waiting for data reads (slowest rank)
  double samples_per_second = 0;
  bool interrupted = false;  ///< stopped early by stop_check: metrics cover a prefix only
  /// The metric named `metric` (loss, accuracy, perplexity; mse = loss, mae for regression).
  /// Throws ConfigError otherwise. Local.
  double metric(const std::string& name) const;
  /// Whether `name` improves upward (accuracy) or downward (loss, perplexity). Local.
  static bool higher_is_better(const std::string& name);
};

/// Evaluates `model` on `dataset`, the data-parallel group's ranks splitting the batches and
/// summing the metrics over `dp`'s control channel (tensor-parallel ranks of a dp group evaluate
/// the same batches together). Runs in inference mode; bf16 uses CPU or CUDA autocast by the
/// model's device. Collective over the world (dp and tp groups).
EvalResult evaluate(model::Model& model, data::Dataset& dataset, comm::ControlPlane& dp,
                    const EvalOptions& options);

/// The metrics of a result as every evaluation log line prints them, periodic and offline, with
/// the same digits: "loss 0.602361 accuracy 0.7860" (classification), "loss 2.604600, perplexity
/// 13.5260, token accuracy 0.2690" (language models), "mse 0.0123, mae 0.0871" (regression).
/// Local.
std::string metrics_text(const EvalResult& r);
/// The same from a result record's fields (add_result_fields). Local.
std::string metrics_text(const nlohmann::json& record);

/// JSON fields of a result (loss, accuracy, perplexity, samples, ...). Local.
void to_json(nlohmann::json& j, const EvalResult& r);

/// Adds a result's fields (task, samples, count, loss, accuracy, perplexity for language models,
/// eval_seconds, samples_per_s, data_wait_seconds) to `record`: the one set of fields that
/// metrics.jsonl's periodic "eval" records and offline evaluation's result files share. Local.
void add_result_fields(nlohmann::ordered_json& record, const EvalResult& r);

}  // namespace hpctrain::eval
