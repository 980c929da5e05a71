#include "hpctrain/eval/multiple_choice.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/multiple_choice.hpp"
#include "hpctrain/model/kv_cache.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {
namespace {

// One ending as the model reads it: the window of context + ending that fits, and where in it
// the scored tokens (the ending's, each with a token before it) are.
struct Row {
  std::vector<std::int64_t> tokens;
  std::int64_t first = 0;  // first scored position in tokens
  std::int64_t end = 0;    // one past the last
};

Row make_row(const data::ChoiceExample& ex, std::size_t ending, std::int64_t context) {
  const auto& e = ex.endings[ending];
  Row row;
  row.tokens = ex.context;
  row.tokens.insert(row.tokens.end(), e.begin(), e.end());
  auto length = static_cast<std::int64_t>(row.tokens.size());
  // The model reads tokens [0, n - 1) to predict [1, n): n - 1 <= context.
  const std::int64_t drop = context > 0 ? std::max<std::int64_t>(0, length - (context + 1)) : 0;
  row.tokens.erase(row.tokens.begin(), row.tokens.begin() + drop);
  length -= drop;
  row.end = length;
  row.first = std::max<std::int64_t>(1, length - static_cast<std::int64_t>(e.size()));
  return row;
}

// The chosen ending of each example of one batch: [sum, sum per token] argmax per example.
void score_batch(model::Model& model, const std::vector<data::ChoiceExample>& examples,
                 std::int64_t begin, std::int64_t end, std::int64_t context,
                 const torch::Device& device, std::vector<double>& chosen) {
  std::vector<Row> rows;
  std::vector<std::int64_t> owner;
  std::int64_t width = 2;
  for (std::int64_t i = begin; i < end; ++i) {
    const auto& ex = examples[static_cast<std::size_t>(i)];
    for (std::size_t e = 0; e < ex.endings.size(); ++e) {
      rows.push_back(make_row(ex, e, context));
      owner.push_back(i);
      width = std::max(width, static_cast<std::int64_t>(rows.back().tokens.size()));
    }
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  torch::Tensor inputs = torch::zeros({n, width - 1}, torch::kLong);
  torch::Tensor targets = torch::zeros({n, width - 1}, torch::kLong);
  for (std::int64_t r = 0; r < n; ++r) {
    const auto& t = rows[static_cast<std::size_t>(r)].tokens;
    const auto len = static_cast<std::int64_t>(t.size());
    const auto all = torch::tensor(t, torch::kLong);
    inputs[r].narrow(0, 0, len - 1).copy_(all.narrow(0, 0, len - 1));
    targets[r].narrow(0, 0, len - 1).copy_(all.narrow(0, 1, len - 1));
  }
  const torch::Tensor outputs = model.forward(inputs.to(device));
  const torch::Tensor logp =
      model::target_log_probs(model, outputs, targets.to(device)).to(torch::kCPU, torch::kDouble);
  const auto acc = logp.accessor<double, 2>();
  // Per example: the best ending by sum and by mean, lowest index on ties.
  std::int64_t r = 0;
  for (std::int64_t i = begin; i < end; ++i) {
    const auto count = examples[static_cast<std::size_t>(i)].endings.size();
    double best = 0, best_norm = 0;
    std::int64_t pick = -1, pick_norm = -1;
    for (std::size_t e = 0; e < count; ++e, ++r) {
      const Row& row = rows[static_cast<std::size_t>(r)];
      double sum = 0;
      for (std::int64_t p = row.first; p < row.end; ++p) sum += acc[r][p - 1];
      const double norm = sum / static_cast<double>(std::max<std::int64_t>(1, row.end - row.first));
      if (pick < 0 || sum > best) {
        best = sum;
        pick = static_cast<std::int64_t>(e);
      }
      if (pick_norm < 0 || norm > best_norm) {
        best_norm = norm;
        pick_norm = static_cast<std::int64_t>(e);
      }
    }
    // Stored + 1: a slot no rank wrote stays 0.
    chosen[static_cast<std::size_t>(2 * i)] = static_cast<double>(pick + 1);
    chosen[static_cast<std::size_t>(2 * i + 1)] = static_cast<double>(pick_norm + 1);
  }
}

}  // namespace

ChoiceResult evaluate_multiple_choice(model::Model& model,
                                      const std::vector<data::ChoiceExample>& examples,
                                      comm::ControlPlane& dp, const ChoiceOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (options.batch_size < 1) throw ConfigError("multiple choice: batch size must be >= 1");
  auto n = static_cast<std::int64_t>(examples.size());
  if (options.max_examples > 0) n = std::min(n, options.max_examples);
  const std::int64_t batches = (n + options.batch_size - 1) / options.batch_size;
  const std::int64_t first = batches * dp.rank() / dp.size();
  const std::int64_t last = batches * (dp.rank() + 1) / dp.size();
  std::vector<double> chosen(static_cast<std::size_t>(2 * std::max<std::int64_t>(n, 1)), 0.0);
  const bool was_training = model.is_training();
  model.eval();
  const auto device = model.parameters().front().device();
  {
    torch::InferenceMode inference;
    for (std::int64_t b = first; b < last; ++b) {
      score_batch(model, examples, b * options.batch_size,
                  std::min(n, (b + 1) * options.batch_size), model::context_length(model), device,
                  chosen);
    }
  }
  model.train(was_training);
  dp.reduce(chosen, comm::ReduceOp::kSum);
  ChoiceResult r;
  r.examples = n;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto pick = static_cast<std::int64_t>(chosen[static_cast<std::size_t>(2 * i)]) - 1;
    const auto pick_norm =
        static_cast<std::int64_t>(chosen[static_cast<std::size_t>(2 * i + 1)]) - 1;
    const std::int64_t label = examples[static_cast<std::size_t>(i)].label;
    r.chosen.push_back(pick);
    r.chosen_norm.push_back(pick_norm);
    r.correct += pick == label;
    r.correct_norm += pick_norm == label;
  }
  r.accuracy = n > 0 ? static_cast<double>(r.correct) / static_cast<double>(n) : 0;
  r.accuracy_norm = n > 0 ? static_cast<double>(r.correct_norm) / static_cast<double>(n) : 0;
  r.seconds =
      dp.max(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  r.examples_per_second = r.seconds > 0 ? static_cast<double>(n) / r.seconds : 0;
  return r;
}

nlohmann::ordered_json choice_json(const ChoiceResult& r) {
  return {{"examples", r.examples},
          {"correct", r.correct},
          {"accuracy", r.accuracy},
          {"correct_norm", r.correct_norm},
          {"accuracy_norm", r.accuracy_norm},
          {"seconds", r.seconds},
          {"examples_per_s", r.examples_per_second}};
}

std::string choice_text(const ChoiceResult& r) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "accuracy %.4f, accuracy_norm %.4f (%lld examples)",
                r.accuracy, r.accuracy_norm, static_cast<long long>(r.examples));
  return buffer;
}

}  // namespace hpctrain::eval
