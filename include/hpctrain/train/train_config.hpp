#pragma once
// The training run's configuration: the sections the trainer owns (run, parallel, eval,
// checkpoint, logging, debug) plus the optimizer, schedule and data sections it reads through
// their owners. docs/CONFIG.md documents every key.

#include <cstdint>
#include <string>

#include "hpctrain/data/data_config.hpp"
#include "hpctrain/train/lr_schedule.hpp"
#include "hpctrain/train/optimizer.hpp"

namespace hpctrain {
class Config;
}

namespace hpctrain::train {

struct RunSection {
  std::string dir;  ///< run directory (config.yaml, metrics.jsonl, checkpoints/ ...)
  std::uint64_t seed = 1234;
  std::int64_t epochs = 1;
  std::int64_t max_steps = 0;      ///< 0: run.epochs decides; otherwise stop at the smaller
  std::string precision = "fp32";  ///< fp32 | bf16 (autocast)
  double time_limit_s = 0;         ///< 0: none; else save and stop before this much wall time
  double time_margin_s = 60;       ///< safety margin added to the measured save time
};

struct ParallelSection {
  int tp = 1;
  double bucket_mb = 25;  ///< gradient bucket size in MiB; 0 = one bucket per parameter
  bool overlap = true;    ///< all-reduce buckets during backward
};

struct EvalSection {
  std::int64_t every_steps = 0;  ///< 0: only at the end
  std::int64_t batch_size = 1000;
  bool at_end = true;
  std::string metric = "";       ///< loss | accuracy | perplexity; default by task
  std::int64_t patience = 0;     ///< early stopping after this many evaluations without gain
  std::int64_t max_samples = 0;  ///< 0 = the whole split
};

struct CheckpointSection {
  std::int64_t every_steps = 0;  ///< 0: not by steps
  double every_minutes = 0;      ///< 0: not by time
  int keep = 2;                  ///< newest checkpoints kept (>= 2), plus the best
  bool keep_best = true;
  bool at_end = true;
  bool background = true;  ///< write files on a background thread
};

struct LoggingSection {
  std::int64_t every_steps = 10;
  std::string progress = "auto";  ///< auto | live | plain | off
};

struct DebugSection {
  std::int64_t nan_step = -1;   ///< inject a NaN loss at this step (tests)
  int nan_rank = 0;             ///< ... on this world rank
  std::int64_t stop_step = -1;  ///< request a stop (as SIGUSR1 would) at this step (tests)
};

struct TrainConfig {
  RunSection run;
  data::DataConfig data;
  OptimizerConfig optim;
  LrSchedule schedule;
  ParallelSection parallel;
  EvalSection eval;
  CheckpointSection checkpoint;
  LoggingSection logging;
  DebugSection debug;
  /// Reads every section but `model` (the model registry reads that one). Local; throws
  /// ConfigError naming the key. `default_dir` is used when run.dir is unset.
  static TrainConfig from(Config& config, const std::string& default_dir);
};

/// Parses "90", "90s", "15m", "2h", "1:30:00" into seconds; throws ConfigError naming `key`. Local.
double parse_duration(const std::string& text, const std::string& key);

}  // namespace hpctrain::train
