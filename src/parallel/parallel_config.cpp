#include "hpctrain/parallel/parallel_config.hpp"

#include "hpctrain/runtime/config.hpp"

namespace hpctrain::parallel {

ParallelConfig ParallelConfig::from(ConfigSection& s) {
  ParallelConfig c;
  c.tp = s.get<int>("tp", c.tp);
  c.bucket_mb = s.get<double>("bucket_mb", c.bucket_mb);
  c.overlap = s.get<bool>("overlap", c.overlap);
  c.shard_optimizer = s.get<bool>("shard_optimizer", c.shard_optimizer);
  if (c.tp < 1) s.fail("tp", "must be a positive integer");
  if (c.bucket_mb < 0) s.fail("bucket_mb", "must be >= 0 (0: one bucket per parameter)");
  return c;
}

ParallelConfig ParallelConfig::of(Config& config) {
  auto section = config.section("parallel");
  return from(section);
}

}  // namespace hpctrain::parallel
