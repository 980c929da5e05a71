#include "hpctrain/train/train_config.hpp"

#include <cmath>

#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "text_evaluation.hpp"

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
    const PrecisionConfig precision = PrecisionConfig::from(s);
    c.run.precision = precision.precision;
    c.run.tf32 = precision.tf32;
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
    c.parallel = parallel::ParallelConfig::from(s);
  }
  {
    auto s = config.section("eval");
    c.eval = eval::EvalConfig::from(s);
  }
  {
    auto s = config.section("checkpoint");
    c.checkpoint = checkpoint::CheckpointConfig::from(s);
  }
  {
    auto s = config.section("logging");
    c.logging.every_steps = s.get<std::int64_t>("every_steps", c.logging.every_steps);
    c.logging.progress = s.get_choice<ProgressMode>("progress", c.logging.progress,
                                                    {{"auto", ProgressMode::kAuto},
                                                     {"live", ProgressMode::kLive},
                                                     {"plain", ProgressMode::kPlain},
                                                     {"off", ProgressMode::kOff}});
    c.logging.tensorboard = s.get<bool>("tensorboard", c.logging.tensorboard);
    c.logging.trace_max_mb = s.get<double>("trace_max_mb", c.logging.trace_max_mb);
    const std::string peak = s.get<std::string>("peak_flops", "");
    if (!peak.empty()) c.logging.peak_flops = plan::parse_peak_flops(peak, "logging.peak_flops");
    if (!(c.logging.trace_max_mb > 0)) s.fail("trace_max_mb", "must be more than 0 (MiB)");
    if (s.has("trace")) {
      auto t = s.section("trace");
      c.logging.trace.start_step = t.get<std::int64_t>("start_step", c.logging.trace.start_step);
      c.logging.trace.steps = t.get<std::int64_t>("steps", c.logging.trace.steps);
      if (c.logging.trace.start_step < 1) {
        t.fail("start_step", "must be at least 1 (step 1 is the first step)");
      }
      if (c.logging.trace.steps < 0) t.fail("steps", "must be 0 (off) or more");
    }
    if (s.has("profile")) {
      auto t = s.section("profile");
      c.logging.profile.start_step =
          t.get<std::int64_t>("start_step", c.logging.profile.start_step);
      c.logging.profile.steps = t.get<std::int64_t>("steps", c.logging.profile.steps);
      c.logging.profile_warmup = t.get<std::int64_t>("warmup", c.logging.profile_warmup);
      if (c.logging.profile.steps < 0) t.fail("steps", "must be 0 (off) or more");
      if (c.logging.profile_warmup < 0) t.fail("warmup", "must be 0 or more");
      if (c.logging.profile.start_step - c.logging.profile_warmup < 1) {
        t.fail("start_step", str("must be more than warmup (", c.logging.profile_warmup,
                                 "): the warmup steps run before it, from step 1 on"));
      }
    }
    if (c.logging.every_steps < 1) s.fail("every_steps", "must be at least 1");
    c.logging.flight_records = s.get<std::int64_t>("flight_records", c.logging.flight_records);
    if (c.logging.flight_records < 0 || c.logging.flight_records > 10000000) {
      s.fail("flight_records", "must be 0 (off) to 10000000 operations kept per rank");
    }
    c.logging.flight_dump = s.get<bool>("flight_dump", c.logging.flight_dump);
    c.logging.straggler_threshold =
        s.get<double>("straggler_threshold", c.logging.straggler_threshold);
    if (!(c.logging.straggler_threshold > 1)) {
      s.fail("straggler_threshold",
             "must be more than 1 (a factor over the median time of the ranks, e.g. 1.2)");
    }
    read_sample_config(s);  // checked here; TextEvaluation reads the keys again
    c.logging.straggler_intervals =
        s.get<std::int64_t>("straggler_intervals", c.logging.straggler_intervals);
    if (c.logging.straggler_intervals < 1) {
      s.fail("straggler_intervals", "must be at least 1 (logging intervals in a row)");
    }
  }
  {
    auto s = config.section("debug");
    c.debug.nan_step = s.get<std::int64_t>("nan_step", c.debug.nan_step);
    c.debug.nan_rank = s.get<int>("nan_rank", c.debug.nan_rank);
    c.debug.stop_step = s.get<std::int64_t>("stop_step", c.debug.stop_step);
    c.debug.stop_rank = s.get<int>("stop_rank", c.debug.stop_rank);
    c.debug.stop_eval_step = s.get<std::int64_t>("stop_eval_step", c.debug.stop_eval_step);
    c.debug.extra_memory_mb = s.get<std::int64_t>("extra_memory_mb", c.debug.extra_memory_mb);
    if (c.debug.extra_memory_mb < 0) s.fail("extra_memory_mb", "must be 0 or more");
    c.debug.overflow_step = s.get<std::int64_t>("overflow_step", c.debug.overflow_step);
    c.debug.overflow_rank = s.get<int>("overflow_rank", c.debug.overflow_rank);
    c.debug.stage_inputs = s.get<bool>("stage_inputs", c.debug.stage_inputs);
    c.debug.fail_step = s.get<std::int64_t>("fail_step", c.debug.fail_step);
    c.debug.fail_rank = s.get<int>("fail_rank", c.debug.fail_rank);
    c.debug.hang_step = s.get<std::int64_t>("hang_step", c.debug.hang_step);
    c.debug.hang_rank = s.get<int>("hang_rank", c.debug.hang_rank);
    c.debug.hang_stop =
        s.get_choice<bool>("hang_mode", c.debug.hang_stop, {{"sleep", false}, {"stop", true}});
    c.debug.desync_step = s.get<std::int64_t>("desync_step", c.debug.desync_step);
    c.debug.desync_rank = s.get<int>("desync_rank", c.debug.desync_rank);
    c.debug.slow_rank = s.get<int>("slow_rank", c.debug.slow_rank);
    c.debug.slow_ms = s.get<double>("slow_ms", c.debug.slow_ms);
    if (c.debug.slow_ms < 0) s.fail("slow_ms", "must be 0 or more");
  }
  {
    auto s = config.section("model");
    c.model = model::ModelSpec::from(s);
  }
  switch (c.optim.loss_scale.mode) {
    case LossScaleMode::kAuto: c.loss_scaling = c.run.precision == Precision::kFp16; break;
    case LossScaleMode::kDynamic: c.loss_scaling = true; break;
    case LossScaleMode::kNone: c.loss_scaling = false; break;
  }
  return c;
}

}  // namespace hpctrain::train
