#include "hpctrain/eval/evaluator.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/prefetcher.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/autocast_dtype.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

double EvalResult::metric(const std::string& name) const {
  if (name == "loss") return loss;
  if (name == "accuracy") return accuracy;
  if (name == "perplexity") return perplexity;
  if (name == "mse") return loss;
  if (name == "mae") return mae;
  throw ConfigError(
      str("eval metric '", name, "' is unknown: use loss, accuracy, perplexity, mse or mae"));
}

bool EvalResult::higher_is_better(const std::string& name) {
  return name == "accuracy";
}

EvalResult evaluate(model::Model& model, data::Dataset& dataset, comm::ControlPlane& dp,
                    const EvalOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.batch_size < 1) throw ConfigError("eval.batch_size must be at least 1");
  std::int64_t n = dataset.info().num_samples;
  if (options.max_samples > 0) n = std::min(n, options.max_samples);
  const std::int64_t batches = (n + options.batch_size - 1) / options.batch_size;
  const std::int64_t first = batches * dp.rank() / dp.size();
  const std::int64_t last = batches * (dp.rank() + 1) / dp.size();
  const std::int64_t slots = (batches + dp.size() - 1) / dp.size();  // most batches of any rank

  // Per batch: loss sum, correct, count, samples, absolute error sum. Exactly one rank writes
  // each row.
  constexpr std::size_t kColumns = 5;
  std::vector<double> table(static_cast<std::size_t>(std::max<std::int64_t>(batches, 1)) * kColumns,
                            0.0);
  auto row = [&](std::int64_t b) { return table.data() + b * kColumns; };
  const bool was_training = model.is_training();
  model.eval();
  auto device =
      model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device();
  // Each rank's batches are one contiguous block of canonical batches: read with one hyperslab
  // each, `prefetch` ahead on a background thread so reading overlaps the forward passes.
  auto produce = [&](std::int64_t i, data::Batch& out) {
    const std::int64_t b = first + i;
    if (b >= last) return false;
    out = dataset.read_range(b * options.batch_size, std::min(n, (b + 1) * options.batch_size));
    return true;
  };
  data::Prefetcher reader(produce, std::max(0, options.prefetch));
  bool interrupted = false;
  {
    torch::InferenceMode inference;
    for (std::int64_t slot = 0; slot < slots; ++slot) {
      if (options.stop_check && options.stop_check()) {
        interrupted = true;
        break;
      }
      const std::int64_t b = first + slot;
      if (b >= last) continue;
      data::Batch batch;
      if (!reader.next(batch))
        throw Error(str("evaluation batch ", b, " was not read (internal error)"));
      auto inputs = batch.inputs.to(device);
      auto targets = batch.targets.to(device);
      model::LossOutput out;
      if (options.forward_loss) {
        out = options.forward_loss(inputs, targets);
      } else {
        compat::AutocastScope autocast(
            options.precision == Precision::kFp16 && !device.is_cuda()
                ? at::kFloat  // LibTorch's CPU autocast has bfloat16 only
                : autocast_dtype(options.precision),
            device);
        auto outputs = model.forward(inputs);
        autocast.end();
        out = model.loss(outputs, targets);
        out.resolve();
        if (options.on_outputs) options.on_outputs(b * options.batch_size, outputs);
      }
      double* r = row(b);
      r[0] = out.loss_sum;
      r[1] = static_cast<double>(out.correct);
      r[2] = static_cast<double>(out.count);
      r[3] = static_cast<double>(batch.size());
      r[4] = out.abs_error_sum;
    }
  }
  if (was_training) model.train();
  dp.reduce(table, comm::ReduceOp::kSum);

  EvalResult result;
  result.task = model.task();
  result.interrupted = interrupted;
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
  double samples = 0;
  double abs_error = 0;
  for (std::int64_t b = 0; b < batches; ++b) {  // batch order: identical on every world size
    const double* r = row(b);
    loss_sum += r[0];
    correct += r[1];
    count += r[2];
    samples += r[3];
    abs_error += r[4];
  }
  result.samples = static_cast<std::int64_t>(samples);
  result.count = static_cast<std::int64_t>(count);
  result.loss = count > 0 ? loss_sum / count : 0;
  result.accuracy = count > 0 ? correct / count : 0;
  result.perplexity = result.task == Task::kLanguageModel ? std::exp(result.loss) : 0;
  result.mae = count > 0 ? abs_error / count : 0;
  std::vector<double> seconds{
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      reader.wait_seconds()};
  dp.reduce(seconds, comm::ReduceOp::kMax);
  result.seconds = seconds[0];
  result.data_wait_seconds = seconds[1];
  result.samples_per_second = result.seconds > 0 ? samples / result.seconds : 0;
  return result;
}

std::string metrics_text(const EvalResult& r) {
  char text[192];
  if (r.task == Task::kLanguageModel) {
    std::snprintf(text, sizeof text, "loss %.6f, perplexity %.4f, token accuracy %.4f", r.loss,
                  r.perplexity, r.accuracy);
  } else if (r.task == Task::kRegression) {
    std::snprintf(text, sizeof text, "mse %.6g, mae %.6g", r.loss, r.mae);
  } else {
    std::snprintf(text, sizeof text, "loss %.6f accuracy %.4f", r.loss, r.accuracy);
  }
  return text;
}

std::string metrics_text(const nlohmann::json& record) {
  EvalResult r;
  r.task = task_from_name(record.value("task", std::string())).value_or(Task::kClassification);
  r.loss = record.value("loss", 0.0);
  r.accuracy = record.value("accuracy", 0.0);
  r.perplexity = record.value("perplexity", 0.0);
  r.mae = record.value("mae", 0.0);
  return metrics_text(r);
}

void add_result_fields(nlohmann::ordered_json& j, const EvalResult& r) {
  j["task"] = task_name(r.task);
  j["samples"] = r.samples;
  j["count"] = r.count;
  j["loss"] = r.loss;
  j["accuracy"] = r.accuracy;
  if (r.task == Task::kLanguageModel) j["perplexity"] = r.perplexity;
  if (r.task == Task::kRegression) {
    j["mse"] = r.loss;
    j["mae"] = r.mae;
  }
  j["eval_seconds"] = r.seconds;
  j["samples_per_s"] = r.samples_per_second;
  j["data_wait_seconds"] = r.data_wait_seconds;
  if (r.interrupted) j["interrupted"] = true;
}

void to_json(nlohmann::json& j, const EvalResult& r) {
  j = nlohmann::json{{"task", task_name(r.task)},
                     {"samples", r.samples},
                     {"count", r.count},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy},
                     {"eval_seconds", r.seconds},
                     {"samples_per_s", r.samples_per_second}};
  if (r.task == Task::kLanguageModel) j["perplexity"] = r.perplexity;
  if (r.task == Task::kRegression) {
    j["mse"] = r.loss;
    j["mae"] = r.mae;
  }
  if (r.interrupted) j["interrupted"] = true;
}

}  // namespace hpctrain::eval
