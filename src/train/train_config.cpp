#include "hpctrain/train/train_config.hpp"

#include <cmath>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

double parse_duration(const std::string& text, const std::string& key) {
  auto bad = [&] {
    return ConfigError(str(key, " = '", text,
                           "': not a duration; write seconds (5400), 90m, 2h "
                           "or H:MM:SS"));
  };
  if (text.empty()) return 0;
  if (text.find(':') != std::string::npos) {
    double total = 0;
    std::size_t start = 0;
    while (true) {
      auto colon = text.find(':', start);
      std::string part =
          text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      try {
        total = total * 60 + std::stod(part);
      } catch (const std::exception&) {
        throw bad();
      }
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return total;
  }
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    throw bad();
  }
  std::string unit = text.substr(pos);
  if (unit.empty() || unit == "s") return value;
  if (unit == "m" || unit == "min") return value * 60;
  if (unit == "h") return value * 3600;
  throw bad();
}

TrainConfig TrainConfig::from(Config& config, const std::string& default_dir) {
  TrainConfig c;
  {
    auto s = config.section("run");
    c.run.dir = s.get<std::string>("dir", default_dir);
    c.run.seed = s.get<std::uint64_t>("seed", c.run.seed);
    c.run.epochs = s.get<std::int64_t>("epochs", c.run.epochs);
    c.run.max_steps = s.get<std::int64_t>("max_steps", c.run.max_steps);
    c.run.precision = s.get<std::string>("precision", c.run.precision);
    s.check_choice("precision", c.run.precision, {"fp32", "bf16"});
    c.run.time_limit_s = parse_duration(s.get<std::string>("time_limit", ""), "run.time_limit");
    c.run.time_margin_s = s.get<double>("time_margin_s", c.run.time_margin_s);
    if (c.run.dir.empty()) s.fail("dir", "must name the run directory");
    if (c.run.epochs < 1) s.fail("epochs", "must be at least 1");
    if (c.run.max_steps < 0) s.fail("max_steps", "must be >= 0 (0: run.epochs decides)");
    if (c.run.time_margin_s < 0) s.fail("time_margin_s", "must be >= 0");
  }
  {
    auto s = config.section("data");
    c.data = data::DataConfig::from(s);
  }
  {
    auto s = config.section("optim");
    c.optim = OptimizerConfig::from(s);
  }
  {
    auto s = config.section("schedule");
    c.schedule = LrSchedule::from(s);
  }
  {
    auto s = config.section("parallel");
    c.parallel.tp = s.get<int>("tp", c.parallel.tp);
    c.parallel.bucket_mb = s.get<double>("bucket_mb", c.parallel.bucket_mb);
    c.parallel.overlap = s.get<bool>("overlap", c.parallel.overlap);
    if (c.parallel.tp < 1) s.fail("tp", "must be a positive integer");
    if (c.parallel.bucket_mb < 0) s.fail("bucket_mb", "must be >= 0 (0: one bucket per parameter)");
  }
  {
    auto s = config.section("eval");
    c.eval.every_steps = s.get<std::int64_t>("every_steps", c.eval.every_steps);
    c.eval.batch_size = s.get<std::int64_t>("batch_size", c.eval.batch_size);
    c.eval.at_end = s.get<bool>("at_end", c.eval.at_end);
    c.eval.metric = s.get<std::string>("metric", c.eval.metric);
    c.eval.patience = s.get<std::int64_t>("patience", c.eval.patience);
    c.eval.max_samples = s.get<std::int64_t>("max_samples", c.eval.max_samples);
    if (c.eval.every_steps < 0) s.fail("every_steps", "must be >= 0 (0: only at the end)");
    if (c.eval.batch_size < 1) s.fail("batch_size", "must be at least 1");
    if (!c.eval.metric.empty()) {
      s.check_choice("metric", c.eval.metric, {"loss", "accuracy", "perplexity", "mse", "mae"});
    }
    if (c.eval.patience < 0) s.fail("patience", "must be >= 0 (0: no early stopping)");
    if (c.eval.max_samples < 0) s.fail("max_samples", "must be >= 0");
  }
  {
    auto s = config.section("checkpoint");
    c.checkpoint.every_steps = s.get<std::int64_t>("every_steps", c.checkpoint.every_steps);
    c.checkpoint.every_minutes = s.get<double>("every_minutes", c.checkpoint.every_minutes);
    c.checkpoint.keep = s.get<int>("keep", c.checkpoint.keep);
    c.checkpoint.keep_best = s.get<bool>("keep_best", c.checkpoint.keep_best);
    c.checkpoint.at_end = s.get<bool>("at_end", c.checkpoint.at_end);
    c.checkpoint.background = s.get<bool>("background", c.checkpoint.background);
    if (c.checkpoint.every_steps < 0) s.fail("every_steps", "must be >= 0 (0: not by steps)");
    if (c.checkpoint.every_minutes < 0) s.fail("every_minutes", "must be >= 0");
    if (c.checkpoint.keep < 2) {
      s.fail("keep",
             "must be at least 2, so a complete checkpoint survives while the next is "
             "written");
    }
  }
  {
    auto s = config.section("logging");
    c.logging.every_steps = s.get<std::int64_t>("every_steps", c.logging.every_steps);
    c.logging.progress = s.get<std::string>("progress", c.logging.progress);
    s.check_choice("progress", c.logging.progress, {"auto", "live", "plain", "off"});
    if (c.logging.every_steps < 1) s.fail("every_steps", "must be at least 1");
  }
  {
    auto s = config.section("debug");
    c.debug.nan_step = s.get<std::int64_t>("nan_step", c.debug.nan_step);
    c.debug.nan_rank = s.get<int>("nan_rank", c.debug.nan_rank);
    c.debug.stop_step = s.get<std::int64_t>("stop_step", c.debug.stop_step);
  }
  return c;
}

}  // namespace hpctrain::train
