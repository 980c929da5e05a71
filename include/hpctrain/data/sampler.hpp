#pragma once
// The global sample stream (DESIGN.md invariant 1): for epoch e the order is a permutation seeded
// by (seed, e), or 0..N-1 without shuffle. Global step s takes the next global batch of that
// order; data-parallel rank r takes its contiguous slice [r*b, (r+1)*b) of it. The stream depends
// on (seed, epoch, position) only, never on the world size, and the state below is all a resume
// needs, even at a different data-parallel size.

#include <cstdint>
#include <vector>

namespace hpctrain::data {

/// Where the stream is. Saved in checkpoints. Local value type.
struct SamplerState {
  std::int64_t epoch = 0;            ///< current epoch (0-based)
  std::int64_t offset_in_epoch = 0;  ///< samples of this epoch's order already consumed
  std::int64_t global_step = 0;      ///< global batches consumed since the start of the run
  std::int64_t consumed_samples = 0; ///< samples consumed since the start of the run
};

/// Training sampler. drop_last: an epoch's remainder smaller than one global batch is skipped
/// (documented in docs/DATA.md), so every step has the same global batch.
class TrainSampler {
 public:
  TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
               bool shuffle);
  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t global_batch() const { return global_batch_; }
  /// Full global batches per epoch: num_samples / global_batch.
  std::int64_t steps_per_epoch() const;
  /// The order of epoch `epoch` (a permutation of 0..N-1). Local; deterministic.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  /// The global indices of the next global batch from `state` (advancing to the next epoch when
  /// fewer than global_batch remain), and the state after it. Local.
  std::vector<std::int64_t> next_global_batch(SamplerState& state) const;
  /// This data-parallel rank's slice of a global batch (global_batch / dp_size samples). Local.
  static std::vector<std::int64_t> rank_slice(const std::vector<std::int64_t>& global_batch,
                                              int dp_rank, int dp_size);

 private:
  std::int64_t num_samples_;
  std::int64_t global_batch_;
  std::uint64_t seed_;
  bool shuffle_;
  mutable std::int64_t cached_epoch_ = -1;
  mutable std::vector<std::int64_t> cached_order_;
};

/// Evaluation sharding: every sample exactly once, no padding, no duplicates. Rank r of dp
/// evaluates the contiguous range [r*N/dp, (r+1)*N/dp) (sizes differ by at most one), in
/// batches of at most `batch` samples. Local.
class EvalShard {
 public:
  EvalShard(std::int64_t num_samples, int dp_rank, int dp_size, std::int64_t batch);
  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  std::int64_t num_batches() const;
  /// The global indices of local batch `i` (0 <= i < num_batches()). Local.
  std::vector<std::int64_t> batch(std::int64_t i) const;
  /// The largest num_batches() over all ranks: ranks with fewer batches still join the
  /// per-batch collectives (stop checks) that many times. Local (pure arithmetic).
  std::int64_t max_batches_over_ranks() const;

 private:
  std::int64_t num_samples_;
  int dp_size_;
  std::int64_t batch_;
  std::int64_t begin_;
  std::int64_t end_;
};

}  // namespace hpctrain::data
