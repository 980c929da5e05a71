#pragma once
// The `parallel` config section: the process grid's tensor-parallel and pipeline sizes, the
// pipeline schedule, and how data-parallel gradients are synchronised. The one place parallel.tp
// and parallel.pp are read and validated: the CLI builds the grid from them, the trainer checks
// the grid against them, `hpctrain plan` sizes the run with them.

#include <vector>

#include "hpctrain/plan/pipeline_schedule.hpp"

namespace hpctrain {
class Config;
class ConfigSection;
}  // namespace hpctrain

namespace hpctrain::parallel {

struct ParallelConfig {
  int tp = 1;             ///< parallel.tp: tensor-parallel group size (divides the world size)
  double bucket_mb = 25;  ///< parallel.bucket_mb: gradient bucket size in MiB; 0 = one per param
  bool overlap = true;    ///< parallel.overlap: all-reduce buckets during backward
  /// parallel.shard_optimizer: each dp rank keeps optimizer state for 1/dp of the parameters
  /// (gradients reduce-scattered, parameters all-gathered after the update)
  bool shard_optimizer = false;
  int pp = 1;  ///< parallel.pp: pipeline stages (ranks per pipeline; pp x tp divides the world)
  /// parallel.pp_schedule: gpipe | 1f1b | interleaved (docs/PIPELINE.md)
  plan::PipelineScheduleKind pp_schedule = plan::PipelineScheduleKind::kOneFOneB;
  int pp_virtual = 1;  ///< parallel.pp_virtual: model chunks per pipeline rank (interleaved)
  /// parallel.pp_layers: blocks per model stage, pp x pp_virtual numbers in stage order (empty:
  /// as even as the blocks allow)
  std::vector<int> pp_layers;

  /// Bucket size in bytes. Local.
  long long bucket_bytes() const { return static_cast<long long>(bucket_mb * 1024 * 1024); }
  /// Model stages: pp x pp_virtual. Local.
  int pipeline_stages() const { return pp * pp_virtual; }
  /// Reads and validates the section (recording defaults; the pipeline keys only when present,
  /// so the resolved config of a run without pipeline stages is what it always was); throws
  /// ConfigError naming the key. Local.
  static ParallelConfig from(ConfigSection& section);
  /// The section of a whole config. Local.
  static ParallelConfig of(Config& config);
};

}  // namespace hpctrain::parallel
