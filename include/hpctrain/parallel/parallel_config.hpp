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

/// parallel.shard: what the data-parallel group divides among its ranks (docs/MEMORY.md), as the
/// ZeRO stages 0 to 3: nothing, the optimizer state, the gradients too, the parameters too.
enum class ShardMode { kNone = 0, kOptimizer = 1, kGradients = 2, kFull = 3 };

/// "none", "optimizer", "gradients" or "full". Local.
const char* shard_mode_name(ShardMode mode);

/// parallel.param_dtype / parallel.reduce_dtype: float32 or bfloat16.
enum class ShardDtype { kFloat32, kBFloat16 };

struct ParallelConfig {
  int tp = 1;             ///< parallel.tp: tensor-parallel group size (divides the world size)
  double bucket_mb = 25;  ///< parallel.bucket_mb: gradient bucket size in MiB; 0 = one per param
  bool overlap = true;    ///< parallel.overlap: all-reduce buckets during backward
  /// parallel.shard: none | optimizer | gradients | full (ZeRO 0/1/2/3). The old spelling
  /// parallel.shard_optimizer: true means optimizer.
  ShardMode shard = ShardMode::kNone;
  /// parallel.shard_group: the ranks that divide the state among them (hybrid sharding when fewer
  /// than the dp group: replicated across groups). 0: the whole dp group ("dp"); -1: the ranks
  /// of one node ("node"); N: groups of N consecutive dp ranks.
  int shard_group = 0;
  /// parallel.reshard_after_forward (full): free a unit's gathered parameters after its forward
  /// and gather them again for backward (true), or keep them until backward (false).
  bool reshard_after_forward = true;
  /// parallel.param_dtype (full): the dtype of the gathered copies forward computes with.
  ShardDtype param_dtype = ShardDtype::kFloat32;
  /// parallel.reduce_dtype (gradients, full): the dtype gradients are reduce-scattered in.
  ShardDtype reduce_dtype = ShardDtype::kFloat32;
  int pp = 1;  ///< parallel.pp: pipeline stages (ranks per pipeline; pp x tp divides the world)
  /// parallel.pp_schedule: gpipe | 1f1b | interleaved (docs/PIPELINE.md)
  plan::PipelineScheduleKind pp_schedule = plan::PipelineScheduleKind::kOneFOneB;
  int pp_virtual = 1;  ///< parallel.pp_virtual: model chunks per pipeline rank (interleaved)
  /// parallel.pp_layers: blocks per model stage, pp x pp_virtual numbers in stage order (empty:
  /// as even as the blocks allow)
  std::vector<int> pp_layers;

  /// Whether the optimizer state is divided over the dp group (every mode but none). Local.
  bool shards_optimizer() const { return shard != ShardMode::kNone; }
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
