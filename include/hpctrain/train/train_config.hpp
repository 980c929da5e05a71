#pragma once
// The training run's configuration: the sections the train layer owns (run, optim, schedule,
// logging, debug) and those it reads through their owners (data, parallel, eval, checkpoint).
// docs/CONFIG.md documents every key.

#include <cstdint>
#include <optional>
#include <string>

#include "hpctrain/checkpoint/checkpoint_schedule.hpp"
#include "hpctrain/data/data_config.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/runtime/autocast_dtype.hpp"
#include "hpctrain/runtime/precision.hpp"
#include "hpctrain/train/lr_schedule.hpp"
#include "hpctrain/train/optimizer.hpp"
#include "hpctrain/train/progress.hpp"

namespace hpctrain {
class Config;
}

namespace hpctrain::train {

// run.precision's type lives in runtime/precision.hpp, where eval, checkpoint and plan name it too.
using hpctrain::Precision;
using hpctrain::precision_name;

struct RunSection {
  std::string dir;  ///< run.dir: run directory (config.yaml, metrics.jsonl, checkpoints/ ...)
  std::uint64_t seed = 1234;
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;              ///< 0: run.epochs decides; otherwise stop at the smaller
  Precision precision = Precision::kFp32;  ///< run.precision (PrecisionConfig)
  std::optional<bool> tf32;                ///< run.tf32 (PrecisionConfig)
  double time_limit_s = 0;    ///< run.time_limit (a duration): 0 = none; else save and stop before
  double time_margin_s = 60;  ///< run.time_margin_s: safety margin added to the measured save time
};

/// A window of steps (logging.trace, logging.profile): steps start_step .. start_step+steps-1,
/// numbered as metrics.jsonl numbers them (step 1 is the first). steps 0: off.
struct StepWindow {
  std::int64_t start_step = 1;
  std::int64_t steps = 0;
  bool contains(std::int64_t step) const {
    return steps > 0 && step >= start_step && step < start_step + steps;
  }
};

struct LoggingSection {
  std::int64_t every_steps = 10;
  ProgressMode progress = ProgressMode::kAuto;  ///< logging.progress: auto | live | plain | off
  /// logging.tensorboard: rank 0 mirrors metrics.jsonl into RUN_DIR/tensorboard/events.out.*
  bool tensorboard = false;
  StepWindow trace;          ///< logging.trace: {start_step, steps}: RUN_DIR/trace.json
  double trace_max_mb = 64;  ///< logging.trace_max_mb: a larger estimated trace is refused
  /// logging.profile: {start_step, steps, warmup}: LibTorch's operator profiler for those steps
  /// into RUN_DIR/profile/rank_<r>.json; `warmup` steps before them run profiled, discarded.
  StepWindow profile;
  std::int64_t profile_warmup = 1;
  /// logging.peak_flops: per-device peak FLOP/s (a number or a preset of `hpctrain plan`); when
  /// set, train records carry "mfu" (model FLOPs per second per rank over the peak). 0: unset.
  double peak_flops = 0;
  /// logging.flight_records: operations the flight recorder keeps per rank (0: off).
  std::int64_t flight_records = 2000;
  /// logging.flight_dump: a stop signal (exit 75) also writes every rank's flight file.
  bool flight_dump = false;
  /// logging.straggler_threshold: a rank whose compute or data-wait time per step exceeds the
  /// interval's median by this factor ...
  double straggler_threshold = 1.2;
  /// logging.straggler_intervals: ... for this many logging intervals in a row is named.
  std::int64_t straggler_intervals = 3;
};

struct DebugSection {
  std::int64_t nan_step = -1;        ///< inject a NaN loss at this step (tests)
  int nan_rank = 0;                  ///< ... on this world rank
  std::int64_t stop_step = -1;       ///< request a stop (as SIGUSR1 would) at this step (tests)
  int stop_rank = -1;                ///< ... on this world rank only (-1: every rank)
  std::int64_t stop_eval_step = -1;  ///< request a stop when the evaluation of this step starts
  std::int64_t overflow_step = -1;   ///< make this step's gradients infinite after their
  int overflow_rank = 0;             ///< all-reduce, on this world rank only (loss-scaling tests)
  std::int64_t extra_memory_mb = 0;  ///< hold this many MiB of touched memory during training
  /// A failure of one rank alone (exit 1), as a rank-local fault would be: at the start of this
  /// step, or, with 0, before the step loop starts (tests of how the job ends).
  std::int64_t fail_step = -1;
  int fail_rank = 0;  ///< ... on this world rank
  /// On CPU, run the GPU step path: hand batches over as it does (a staged copy,
  /// data::InputStaging::kCopy), copy them with non_blocking, and leave the loss's metric sums
  /// pending until after the gradient norm (tests: the training must not change).
  bool stage_inputs = false;
  /// Hang tests: at step `hang_step`, world rank `hang_rank` stops in backward, either sleeping
  /// (its heartbeat goes on) or stopping itself with SIGSTOP (hang_mode: sleep | stop).
  std::int64_t hang_step = -1;
  int hang_rank = 0;
  bool hang_stop = false;  ///< debug.hang_mode: sleep (false) | stop (true)
  /// Desynchronisation test: at step `desync_step`, world rank `desync_rank` enters a world
  /// barrier the other ranks never enter (they enter the stop agreement's all-reduce).
  std::int64_t desync_step = -1;
  int desync_rank = 0;
  /// Straggler tests: world rank `slow_rank` sleeps `slow_ms` milliseconds in every forward.
  int slow_rank = -1;
  double slow_ms = 0;
};

/// A training run's configuration, parsed once. Each layer owns its section's struct, defaults
/// and validation (PrecisionConfig, model::ModelSpec, data::DataConfig, OptimizerConfig,
/// LrSchedule, parallel::ParallelConfig, eval::EvalConfig, checkpoint::CheckpointConfig); this
/// gathers them. The model families read the rest of the `model` section when the model is built.
struct TrainConfig {
  RunSection run;
  model::ModelSpec model;
  data::DataConfig data;
  OptimizerConfig optim;
  LrSchedule schedule;
  parallel::ParallelConfig parallel;
  eval::EvalConfig eval;
  checkpoint::CheckpointConfig checkpoint;
  LoggingSection logging;
  DebugSection debug;
  /// optim.loss_scale resolved against run.precision: dynamic loss scaling on or off.
  bool loss_scaling = false;
  /// Reads every section (of `model`, the ModelSpec). Local; throws ConfigError naming the key.
  /// `default_dir` is used when run.dir is unset.
  static TrainConfig from(Config& config, const std::string& default_dir);
};

/// Parses "90", "90s", "15m", "2h", "1:30:00" into seconds; throws ConfigError naming `key`. Local.
double parse_duration(const std::string& text, const std::string& key);

}  // namespace hpctrain::train
