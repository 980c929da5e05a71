#pragma once
// The `parallel` config section: the process grid's tensor-parallel size and how data-parallel
// gradients are synchronised. The one place parallel.tp is read and validated: the CLI builds the
// grid from it, the trainer checks the grid against it, `hpctrain plan` sizes the run with it.

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

  /// Bucket size in bytes. Local.
  long long bucket_bytes() const { return static_cast<long long>(bucket_mb * 1024 * 1024); }
  /// Reads and validates the section (recording defaults); throws ConfigError naming the key.
  /// Local.
  static ParallelConfig from(ConfigSection& section);
  /// The section of a whole config. Local.
  static ParallelConfig of(Config& config);
};

}  // namespace hpctrain::parallel
