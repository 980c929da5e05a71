#include "hpctrain/data/sampler.hpp"

#include <unistd.h>

#include <algorithm>
#include <numeric>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

// Every constant and step below is part of the data format: changing any of them changes every
// run's sample order. scripts/data_order.py mirrors this file line by line.
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kEpochMix = 0xD1B54A32D192ED03ull;

std::uint64_t splitmix64(std::uint64_t& state) {
  state += kGolden;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

class Xoshiro256StarStar {
 public:
  explicit Xoshiro256StarStar(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& word : s_) word = splitmix64(sm);
  }
  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, n) without modulo bias (Lemire, "Fast random integer generation in an
  // interval", 2019).
  std::uint64_t below(std::uint64_t n) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
    auto low = static_cast<std::uint64_t>(m);
    if (low < n) {
      const std::uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * n;
        low = static_cast<std::uint64_t>(m);
      }
    }
    return static_cast<std::uint64_t>(m >> 64);
  }

 private:
  std::uint64_t s_[4];
};

}  // namespace

std::vector<std::int64_t> epoch_permutation(std::int64_t num_samples, std::uint64_t seed,
                                            std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(std::max<std::int64_t>(num_samples, 0)));
  std::iota(order.begin(), order.end(), 0);
  Xoshiro256StarStar rng(seed ^ (static_cast<std::uint64_t>(epoch) * kEpochMix));
  for (std::int64_t i = num_samples - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

TrainSampler::TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
                           bool shuffle)
    : num_samples_(num_samples), global_batch_(global_batch), seed_(seed), shuffle_(shuffle) {
  if (global_batch < 1) {
    throw ConfigError(
        str("global batch ", global_batch, " must be at least 1: check data.batch_size"));
  }
  // The sample order of an epoch is a vector of num_samples indices: a file that declares far
  // more samples than memory holds (a damaged or hostile shape) is refused here, naming the
  // count, instead of failing later with a bare std::bad_alloc.
  const double order_bytes = static_cast<double>(num_samples) * sizeof(std::int64_t);
  const double memory =
      static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && order_bytes > memory / 2) {
    throw DataError(str("the training set declares ", num_samples,
                        " samples: the order of one epoch would take ", format_bytes(order_bytes),
                        ", more than half of this machine's memory (", format_bytes(memory),
                        "): check the file's /inputs and /labels shapes (hpctrain inspect data)"));
  }
  if (num_samples < global_batch) {
    throw DataError(str("the training set holds ", num_samples,
                        " samples, fewer than one global batch of ", global_batch,
                        " (data.batch_size x data-parallel ranks): use a smaller data.batch_size "
                        "or fewer ranks"));
  }
}

std::int64_t TrainSampler::steps_per_epoch() const {
  return num_samples_ / global_batch_;
}

std::vector<std::int64_t> TrainSampler::epoch_order(std::int64_t epoch) const {
  if (!shuffle_) {
    std::vector<std::int64_t> order(static_cast<std::size_t>(num_samples_));
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  return epoch_permutation(num_samples_, seed_, epoch);
}

bool TrainSampler::at_epoch_end(const SamplerState& state) const {
  return state.offset_in_epoch + global_batch_ > num_samples_;
}

void TrainSampler::advance(SamplerState& state) const {
  if (state.epoch < 0 || state.offset_in_epoch < 0 || state.offset_in_epoch > num_samples_) {
    throw DataError(str("sampler state (epoch ", state.epoch, ", offset in epoch ",
                        state.offset_in_epoch, ") does not fit a training set of ", num_samples_,
                        " samples: the checkpoint was made with another dataset; point data.train "
                        "at the file it was trained on, or start a new run"));
  }
  if (at_epoch_end(state)) {
    ++state.epoch;
    state.offset_in_epoch = 0;
  }
  state.offset_in_epoch += global_batch_;
  ++state.global_step;
  state.consumed_samples += global_batch_;
}

std::vector<std::int64_t> TrainSampler::next_global_batch(SamplerState& state) const {
  advance(state);
  if (cached_epoch_ != state.epoch) {
    cached_order_ = epoch_order(state.epoch);
    cached_epoch_ = state.epoch;
  }
  const auto first = cached_order_.begin() + (state.offset_in_epoch - global_batch_);
  return std::vector<std::int64_t>(first, first + global_batch_);
}

std::vector<std::int64_t> TrainSampler::rank_slice(const std::vector<std::int64_t>& global_batch,
                                                   int dp_rank, int dp_size) {
  const auto size = static_cast<std::int64_t>(global_batch.size());
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || size % dp_size != 0) {
    throw Error(str("rank_slice: dp rank ", dp_rank, " of ", dp_size,
                    " cannot take an equal slice of a global batch of ", size,
                    " (the global batch must be data.batch_size x data-parallel ranks)"));
  }
  const std::int64_t per_rank = size / dp_size;
  const auto first = global_batch.begin() + dp_rank * per_rank;
  return std::vector<std::int64_t>(first, first + per_rank);
}

EvalShard::EvalShard(std::int64_t num_samples, int dp_rank, int dp_size, std::int64_t batch)
    : num_samples_(num_samples), dp_size_(dp_size), batch_(batch) {
  if (batch < 1) throw ConfigError(str("evaluation batch ", batch, " must be at least 1"));
  if (dp_size < 1 || dp_rank < 0 || dp_rank >= dp_size || num_samples < 0) {
    throw ConfigError(str("evaluation shard: dp rank ", dp_rank, " of ", dp_size, " over ",
                          num_samples, " samples is not a valid shard"));
  }
  begin_ = dp_rank * num_samples / dp_size;
  end_ = (dp_rank + 1) * num_samples / dp_size;
}

std::int64_t EvalShard::num_batches() const {
  return (end_ - begin_ + batch_ - 1) / batch_;
}

std::int64_t EvalShard::batch_size(std::int64_t i) const {
  return std::min(batch_, end_ - batch_begin(i));
}

std::vector<std::int64_t> EvalShard::batch(std::int64_t i) const {
  if (i < 0 || i >= num_batches()) {
    throw Error(str("evaluation batch ", i, " is outside [0, ", num_batches(), ")"));
  }
  std::vector<std::int64_t> indices(static_cast<std::size_t>(batch_size(i)));
  std::iota(indices.begin(), indices.end(), batch_begin(i));
  return indices;
}

std::int64_t EvalShard::max_batches_over_ranks() const {
  // Shards have floor(N/dp) or ceil(N/dp) samples; the larger exists whenever dp does not divide N.
  const std::int64_t largest = (num_samples_ + dp_size_ - 1) / dp_size_;
  return (largest + batch_ - 1) / batch_;
}

}  // namespace hpctrain::data
