#include "hpctrain/eval/evaluator.hpp"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "eval_collectives.hpp"
#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/prefetcher.hpp"
#include "hpctrain/model/model.hpp"
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

EvalResult evaluate(model::Model& model, data::Dataset& dataset, comm::Communicator& dp,
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
  torch::Tensor table = torch::zeros({std::max<std::int64_t>(batches, 1), 5}, torch::kDouble);
  auto rows = table.accessor<double, 2>();
  const bool was_training = model.is_training();
  model.eval();
  auto device =
      model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device();
  const bool cuda = device.is_cuda();
  // Autocast is thread state: on for the forward pass only, off again whatever happens.
  auto set_autocast = [&](bool on) {
    if (!options.bf16) return;
    if (cuda) {
      compat::set_cuda_autocast(on, torch::kBFloat16);
    } else {
      compat::set_cpu_autocast(on, torch::kBFloat16);
    }
  };
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
      set_autocast(true);
      model::LossOutput out;
      try {
        auto outputs = model.forward(inputs);
        set_autocast(false);
        out = model.loss(outputs, targets);
      } catch (...) {
        set_autocast(false);
        throw;
      }
      if (options.bf16) compat::clear_autocast_cache();
      rows[b][0] = out.loss_sum;
      rows[b][1] = static_cast<double>(out.correct);
      rows[b][2] = static_cast<double>(out.count);
      rows[b][3] = static_cast<double>(batch.size());
      rows[b][4] = out.abs_error_sum;
    }
  }
  if (was_training) model.train();
  detail::all_reduce_host(dp, table, comm::ReduceOp::kSum, device);

  EvalResult result;
  result.task = model.task();
  result.interrupted = interrupted;
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
  double samples = 0;
  double abs_error = 0;
  for (std::int64_t b = 0; b < batches; ++b) {  // batch order: identical on every world size
    abs_error += rows[b][4];
    loss_sum += rows[b][0];
    correct += rows[b][1];
    count += rows[b][2];
    samples += rows[b][3];
  }
  result.samples = static_cast<std::int64_t>(samples);
  result.count = static_cast<std::int64_t>(count);
  result.loss = count > 0 ? loss_sum / count : 0;
  result.accuracy = count > 0 ? correct / count : 0;
  result.perplexity = result.task == "language_model" ? std::exp(result.loss) : 0;
  result.mae = count > 0 ? abs_error / count : 0;
  auto seconds = torch::tensor(
      {std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
       reader.wait_seconds()},
      torch::kDouble);
  detail::all_reduce_host(dp, seconds, comm::ReduceOp::kMax, device);
  result.seconds = seconds[0].item<double>();
  result.data_wait_seconds = seconds[1].item<double>();
  result.samples_per_second = result.seconds > 0 ? samples / result.seconds : 0;
  return result;
}

void to_json(nlohmann::json& j, const EvalResult& r) {
  j = nlohmann::json{{"task", r.task},
                     {"samples", r.samples},
                     {"count", r.count},
                     {"loss", r.loss},
                     {"accuracy", r.accuracy},
                     {"eval_seconds", r.seconds},
                     {"samples_per_s", r.samples_per_second}};
  if (r.task == "language_model") j["perplexity"] = r.perplexity;
  if (r.task == "regression") {
    j["mse"] = r.loss;
    j["mae"] = r.mae;
  }
  if (r.interrupted) j["interrupted"] = true;
}

}  // namespace hpctrain::eval
