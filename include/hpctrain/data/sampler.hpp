#pragma once
// The global sample stream (docs/ARCHITECTURE.md, invariant 1): for epoch e the order is a
// permutation seeded by (seed, e), or 0..N-1 without shuffle. Global step s takes the next global
// batch of that order; data-parallel rank r takes its contiguous slice [r*b, (r+1)*b) of it. The
// stream depends on (seed, epoch, position) only, never on the world size, and the state below is
// all a resume needs, even at a different data-parallel size.
//
// Up to kHeldOrderMaxSamples samples the permutation is a Fisher-Yates shuffle driven by
// xoshiro256** seeded through splitmix64, with Lemire's unbiased bounded integers, held in memory
// (8 bytes per sample). Above it, a keyed bijection computed per index (a Feistel network with
// cycle walking), so the sampler's memory does not grow with the sample count. Both are fixed
// integer arithmetic, identical on every platform and compiler (std::shuffle and torch's RNG are
// not). A weighted mixture of sources blends them in Megatron-LM's greedy order, with an epoch of
// its own per source. docs/DATA.md states every step exactly and scripts/data_order.py is a
// Python reference implementation.

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::data {

/// Where the stream is. Saved in checkpoints. Local value type.
struct SamplerState {
  std::int64_t epoch = 0;             ///< current epoch (0-based)
  std::int64_t offset_in_epoch = 0;   ///< samples of this epoch's order already consumed
  std::int64_t global_step = 0;       ///< global batches consumed since the start of the run
  std::int64_t consumed_samples = 0;  ///< samples consumed since the start of the run
  /// Weighted mixtures only: samples drawn from each source so far (the blend's position); empty
  /// otherwise.
  std::vector<std::int64_t> source_consumed;
};

/// How an epoch's order is made (docs/DATA.md, "The permutation, exactly").
enum class SampleOrder {
  kHeld,   ///< Fisher-Yates, held in memory: 8 bytes per sample
  kKeyed,  ///< a keyed bijection computed per index: no per-sample memory
};

/// Above this many samples a shuffled order is keyed, at or below it held (64 MiB at the limit).
constexpr std::int64_t kHeldOrderMaxSamples = std::int64_t{1} << 23;

/// kKeyed above kHeldOrderMaxSamples, else kHeld. Local.
SampleOrder default_sample_order(std::int64_t num_samples);
/// "held" or "keyed" (the checkpoint's word). Local.
const char* sample_order_name(SampleOrder order);

/// The keyed permutation of 0..n-1 for (seed, epoch): position -> sample, one index at a time, in
/// O(1) memory. A balanced Feistel network of kRounds rounds on the smallest even number of bits
/// that holds n, walking the cycle until the value falls below n. Local value type.
class KeyedPermutation {
 public:
  static constexpr int kRounds = 6;
  KeyedPermutation(std::int64_t num_samples, std::uint64_t seed, std::int64_t epoch);
  /// The sample at `position` (0 <= position < n). Local.
  std::int64_t operator()(std::int64_t position) const;

 private:
  std::uint64_t n_;
  int half_bits_;
  std::uint64_t half_mask_;
  std::uint64_t keys_[kRounds];
};

/// One source of a weighted mixture: global indices [begin, begin + count) of the dataset and
/// its weight (any positive number; weights are normalised). Local value type.
struct SamplerSource {
  std::string name;
  double weight = 1;
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

/// The order of epoch `epoch` for `seed`: a permutation of 0..num_samples-1 (see above). Local;
/// a pure function of its arguments.
std::vector<std::int64_t> epoch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                            std::int64_t epoch);

/// The seed of mixture source `source` (0-based) under the run's seed. Local.
std::uint64_t source_seed(std::uint64_t seed, std::size_t source);

/// Training sampler. drop_last: an epoch's remainder smaller than one global batch is skipped
/// (documented in docs/DATA.md), so every step has the same global batch.
/// With two or more `sources` the stream is their weighted blend: position p of the run's stream
/// (p = consumed samples) comes from the source that lags its weight most, and that source's
/// k-th draw is sample k mod count of its epoch k / count (an order per source and epoch). An
/// epoch of the mixture is then only a count (the sum of the sources' samples).
/// Not thread-safe (it caches the current epoch's order): give each thread its own copy.
class TrainSampler {
 public:
  /// Throws DataError when num_samples < global_batch (not one full batch per epoch) and
  /// ConfigError when global_batch < 1. `order`: how a shuffled epoch is ordered (a checkpoint's
  /// choice on resume; default_sample_order otherwise). Local.
  TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
               bool shuffle);
  TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
               bool shuffle, SampleOrder order, std::vector<SamplerSource> sources = {});
  SampleOrder order() const { return order_; }
  const std::vector<SamplerSource>& sources() const { return sources_; }
  bool is_mixture() const { return sources_.size() >= 2; }
  /// Bytes the sampler holds for its orders at most (held orders: 8 per sample of the epoch or of
  /// each held source; keyed: none), plus one global batch of indices. Local.
  std::int64_t memory_bytes() const;
  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t global_batch() const { return global_batch_; }
  /// Full global batches per epoch: num_samples / global_batch.
  std::int64_t steps_per_epoch() const;
  /// The order of epoch `epoch` (a permutation of 0..N-1). Local; deterministic. Not for
  /// mixtures; allocates N indices whatever the order kind (tests, tools).
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  /// The global indices of the next global batch from `state` (advancing to the next epoch when
  /// fewer than global_batch remain), and the state after it. Local.
  /// Throws DataError when the state does not fit this dataset (a checkpoint of another one).
  std::vector<std::int64_t> next_global_batch(SamplerState& state) const;
  /// Advances `state` exactly as next_global_batch does, without computing the batch. Local.
  void advance(SamplerState& state) const;
  /// Whether the next global batch starts a new epoch (fewer than global_batch remain). Local.
  bool at_epoch_end(const SamplerState& state) const;
  std::uint64_t seed() const { return seed_; }
  bool shuffle() const { return shuffle_; }
  /// This data-parallel rank's slice of a global batch (global_batch / dp_size samples). Local.
  /// Throws Error when dp_size does not divide the global batch.
  static std::vector<std::int64_t> rank_slice(const std::vector<std::int64_t>& global_batch,
                                              int dp_rank, int dp_size);

 private:
  std::int64_t num_samples_;
  std::int64_t global_batch_;
  std::uint64_t seed_;
  bool shuffle_;
  SampleOrder order_;
  std::vector<SamplerSource> sources_;
  std::vector<std::uint64_t> source_units_;  // weights in units of 2^-32, summing to ~2^32

  // One epoch's order over `count` samples, held or keyed.
  struct Cursor {
    std::int64_t epoch = -1;
    std::vector<std::int64_t> held;
  };
  std::int64_t order_at(Cursor& cursor, std::int64_t count, std::uint64_t seed, std::int64_t epoch,
                        std::int64_t position) const;
  void check_state(const SamplerState& state) const;
  // The next global_batch indices of the blend from `state` (source_consumed advanced).
  void blend(SamplerState& state, std::vector<std::int64_t>* out) const;
  mutable Cursor cursor_;
  mutable std::vector<Cursor> source_cursors_;
};

/// Evaluation sharding: every sample exactly once, no padding, no duplicates. Rank r of dp
/// evaluates the contiguous range [r*N/dp, (r+1)*N/dp) (sizes differ by at most one), in
/// batches of at most `batch` samples. Local.
class EvalShard {
 public:
  /// Throws ConfigError for batch < 1 or a dp_rank outside [0, dp_size). Local.
  EvalShard(std::int64_t num_samples, int dp_rank, int dp_size, std::int64_t batch);
  std::int64_t num_samples() const { return num_samples_; }
  /// Samples of this rank: end() - begin(). Local.
  std::int64_t size() const { return end_ - begin_; }
  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  std::int64_t num_batches() const;
  /// The global indices of local batch `i` (0 <= i < num_batches()): a contiguous range. Local.
  std::vector<std::int64_t> batch(std::int64_t i) const;
  /// The first global index of local batch `i` and its size. Local.
  std::int64_t batch_begin(std::int64_t i) const { return begin_ + i * batch_; }
  std::int64_t batch_size(std::int64_t i) const;
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
