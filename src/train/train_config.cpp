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

namespace {

RunSection read_run_section(ConfigSection& s, const std::string& default_dir) {
  RunSection out;
  out.dir = s.get<std::string>("dir", default_dir);
  out.seed = s.get<std::uint64_t>("seed", out.seed);
  out.epochs = s.get<std::int64_t>("epochs", out.epochs);
  out.max_steps = s.get<std::int64_t>("max_steps", out.max_steps);
  const PrecisionConfig precision = PrecisionConfig::from(s);
  out.precision = precision.precision;
  out.tf32 = precision.tf32;
  out.time_limit_s = parse_duration(s.get<std::string>("time_limit", ""), "run.time_limit");
  out.time_margin_s = s.get<double>("time_margin_s", out.time_margin_s);
  if (out.dir.empty()) s.fail("dir", "must name the run directory");
  if (out.epochs < 1) s.fail("epochs", "must be at least 1");
  if (out.max_steps < 0) s.fail("max_steps", "must be >= 0 (0: run.epochs decides)");
  if (out.time_margin_s < 0) s.fail("time_margin_s", "must be >= 0");
  return out;
}

LoggingSection read_logging_section(ConfigSection& s) {
  LoggingSection out;
  out.every_steps = s.get<std::int64_t>("every_steps", out.every_steps);
  out.progress = s.get_choice<ProgressMode>("progress", out.progress,
                                            {{"auto", ProgressMode::kAuto},
                                             {"live", ProgressMode::kLive},
                                             {"plain", ProgressMode::kPlain},
                                             {"off", ProgressMode::kOff}});
  out.tensorboard = s.get<bool>("tensorboard", out.tensorboard);
  out.trace_max_mb = s.get<double>("trace_max_mb", out.trace_max_mb);
  const std::string peak = s.get<std::string>("peak_flops", "");
  if (!peak.empty()) out.peak_flops = plan::parse_peak_flops(peak, "logging.peak_flops");
  if (!(out.trace_max_mb > 0)) s.fail("trace_max_mb", "must be more than 0 (MiB)");
  if (s.has("trace")) {
    auto t = s.section("trace");
    out.trace.start_step = t.get<std::int64_t>("start_step", out.trace.start_step);
    out.trace.steps = t.get<std::int64_t>("steps", out.trace.steps);
    if (out.trace.start_step < 1) {
      t.fail("start_step", "must be at least 1 (step 1 is the first step)");
    }
    if (out.trace.steps < 0) t.fail("steps", "must be 0 (off) or more");
  }
  if (s.has("profile")) {
    auto t = s.section("profile");
    out.profile.start_step = t.get<std::int64_t>("start_step", out.profile.start_step);
    out.profile.steps = t.get<std::int64_t>("steps", out.profile.steps);
    out.profile_warmup = t.get<std::int64_t>("warmup", out.profile_warmup);
    if (out.profile.steps < 0) t.fail("steps", "must be 0 (off) or more");
    if (out.profile_warmup < 0) t.fail("warmup", "must be 0 or more");
    if (out.profile.start_step - out.profile_warmup < 1) {
      t.fail("start_step", str("must be more than warmup (", out.profile_warmup,
                               "): the warmup steps run before it, from step 1 on"));
    }
  }
  if (out.every_steps < 1) s.fail("every_steps", "must be at least 1");
  out.flight_records = s.get<std::int64_t>("flight_records", out.flight_records);
  if (out.flight_records < 0 || out.flight_records > 10000000) {
    s.fail("flight_records", "must be 0 (off) to 10000000 operations kept per rank");
  }
  out.flight_dump = s.get<bool>("flight_dump", out.flight_dump);
  out.straggler_threshold = s.get<double>("straggler_threshold", out.straggler_threshold);
  if (!(out.straggler_threshold > 1)) {
    s.fail("straggler_threshold",
           "must be more than 1 (a factor over the median time of the ranks, e.g. 1.2)");
  }
  read_sample_config(s);  // checked here; TextEvaluation reads the keys again
  out.straggler_intervals = s.get<std::int64_t>("straggler_intervals", out.straggler_intervals);
  if (out.straggler_intervals < 1) {
    s.fail("straggler_intervals", "must be at least 1 (logging intervals in a row)");
  }
  return out;
}

DebugSection read_debug_section(ConfigSection& s) {
  DebugSection out;
  out.nan_step = s.get<std::int64_t>("nan_step", out.nan_step);
  out.nan_rank = s.get<int>("nan_rank", out.nan_rank);
  out.stop_step = s.get<std::int64_t>("stop_step", out.stop_step);
  out.stop_rank = s.get<int>("stop_rank", out.stop_rank);
  out.stop_eval_step = s.get<std::int64_t>("stop_eval_step", out.stop_eval_step);
  out.extra_memory_mb = s.get<std::int64_t>("extra_memory_mb", out.extra_memory_mb);
  if (out.extra_memory_mb < 0) s.fail("extra_memory_mb", "must be 0 or more");
  out.overflow_step = s.get<std::int64_t>("overflow_step", out.overflow_step);
  out.overflow_rank = s.get<int>("overflow_rank", out.overflow_rank);
  out.stage_inputs = s.get<bool>("stage_inputs", out.stage_inputs);
  out.fail_step = s.get<std::int64_t>("fail_step", out.fail_step);
  out.fail_rank = s.get<int>("fail_rank", out.fail_rank);
  out.hang_step = s.get<std::int64_t>("hang_step", out.hang_step);
  out.hang_rank = s.get<int>("hang_rank", out.hang_rank);
  out.hang_stop =
      s.get_choice<bool>("hang_mode", out.hang_stop, {{"sleep", false}, {"stop", true}});
  out.desync_step = s.get<std::int64_t>("desync_step", out.desync_step);
  out.desync_rank = s.get<int>("desync_rank", out.desync_rank);
  out.slow_rank = s.get<int>("slow_rank", out.slow_rank);
  out.slow_ms = s.get<double>("slow_ms", out.slow_ms);
  if (out.slow_ms < 0) s.fail("slow_ms", "must be 0 or more");
  return out;
}

}  // namespace

TrainConfig TrainConfig::from(Config& config, const std::string& default_dir) {
  TrainConfig c;
  {
    auto s = config.section("run");
    c.run = read_run_section(s, default_dir);
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
    c.logging = read_logging_section(s);
  }
  {
    auto s = config.section("debug");
    c.debug = read_debug_section(s);
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
