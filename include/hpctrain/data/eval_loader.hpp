#pragma once
// This rank's evaluation batches: its EvalShard (every sample of the split exactly once over all
// ranks, no padding), read as contiguous ranges by a Prefetcher.

#include <cstdint>
#include <memory>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/prefetcher.hpp"
#include "hpctrain/data/sampler.hpp"

namespace hpctrain::data {

class EvalLoader {
 public:
  /// Reads `shard`'s batches in order, `prefetch` ahead. `dataset` must outlive the loader. Local.
  EvalLoader(Dataset& dataset, const EvalShard& shard, int prefetch);

  /// The next batch; false after the shard's last one (ranks may have one batch fewer than
  /// others: see EvalShard::max_batches_over_ranks). Rethrows reader errors. Local.
  bool next(Batch& out) { return prefetcher_->next(out); }
  const EvalShard& shard() const { return shard_; }
  /// Seconds next() waited for data so far. Local.
  double wait_seconds() const { return prefetcher_->wait_seconds(); }

 private:
  EvalShard shard_;
  std::unique_ptr<Prefetcher> prefetcher_;
};

}  // namespace hpctrain::data
