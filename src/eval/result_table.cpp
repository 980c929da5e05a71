#include "result_table.hpp"

#include <cstdio>

#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval::detail {
namespace {

bool is_lm(const nlohmann::json& r) {
  return task_from_name(r.value("task", std::string())) == Task::kLanguageModel;
}

}  // namespace

std::string result_line(const nlohmann::ordered_json& r, const std::string& file,
                        const nlohmann::json& best) {
  std::string line =
      str("eval step ", r.at("step").get<std::int64_t>(), " (", r.at("split").get<std::string>(),
          "): ", metrics_text(r), ", ", r.at("samples").get<std::int64_t>(), " samples in ",
          format_seconds(r.at("eval_seconds").get<double>()), " (",
          static_cast<std::int64_t>(r.at("samples_per_s").get<double>()), " samples/s, batch ",
          r.at("batch_size").get<std::int64_t>(), ", ", r.at("precision").get<std::string>(),
          ") -> ", file);
  if (r.contains("bf16_vs_fp32")) {
    const auto& c = r.at("bf16_vs_fp32");
    char diff[160];
    std::snprintf(diff, sizeof diff, "; bf16 - fp32: loss %+.3e, accuracy %+.3e",
                  c.at("loss_diff").get<double>(), c.at("accuracy_diff").get<double>());
    line += diff;
  }
  if (!best.is_null()) {
    line += str("; best ", best.at("metric").get<std::string>(), " so far: step ",
                best.at("step").get<std::int64_t>());
  }
  return line;
}

std::string result_table(const std::vector<nlohmann::json>& records,
                         const std::set<std::int64_t>& now, const std::string& dir) {
  if (records.empty()) return {};
  const std::string metric = records.back().value("metric", std::string("loss"));
  const bool higher = metric == "accuracy";
  std::int64_t best_step = -1;
  double best = 0;
  for (const auto& r : records) {
    if (!r.contains(metric)) continue;
    const double v = r.at(metric).get<double>();
    if (best_step < 0 || (higher ? v >= best : v <= best)) {
      best = v;
      best_step = r.at("step").get<std::int64_t>();
    }
  }
  const bool lm = is_lm(records.back());
  // Multiple choice (--task): accuracy and length-normalised accuracy instead of the loss.
  const bool choice = records.back().contains("accuracy_norm");
  std::string out = str("results in ", dir, " (", records.front().value("split", std::string()),
                        ", ", records.front().at("key").value("precision", std::string()),
                        "; * best by ", metric, ", + evaluated now):\n");
  char line[200];
  std::snprintf(line, sizeof line, "  %10s %9s %12s %12s %10s %12s\n", "step", "samples",
                choice ? "accuracy" : "loss",
                choice ? "acc_norm" : (lm ? "perplexity" : "accuracy"), "time", "samples/s");
  out += line;
  for (const auto& r : records) {
    const auto step = r.at("step").get<std::int64_t>();
    std::snprintf(line, sizeof line, "%c%c%10lld %9lld %12.6f %12.6f %10s %12.0f\n",
                  step == best_step ? '*' : ' ', now.count(step) ? '+' : ' ',
                  static_cast<long long>(step),
                  static_cast<long long>(r.at("samples").get<std::int64_t>()),
                  choice ? r.value("accuracy", 0.0) : r.value("loss", 0.0),
                  choice ? r.value("accuracy_norm", 0.0)
                         : (lm ? r.value("perplexity", 0.0) : r.value("accuracy", 0.0)),
                  format_seconds(r.at("eval_seconds").get<double>()).c_str(),
                  r.at("samples_per_s").get<double>());
    out += line;
  }
  out.pop_back();
  return out;
}

}  // namespace hpctrain::eval::detail
