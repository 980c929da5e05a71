#include "hpctrain/data/sampler.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

// Every constant and step below is part of the data format: changing any of them changes every
// run's sample order. scripts/data_order.py mirrors this file line by line.
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kEpochMix = 0xD1B54A32D192ED03ull;
// Separates the keyed permutation's keys from the Fisher-Yates generator of the same (seed, epoch).
constexpr std::uint64_t kKeyedMix = 0x8CB92BA72F3D8DD7ull;
// Spreads mixture sources' seeds.
constexpr std::uint64_t kSourceMix = 0xA0761D6478BD642Full;
// A mixture's weights are integers in units of 2^-32 (exact arithmetic, reproducible anywhere).
constexpr double kWeightUnit = 4294967296.0;

std::uint64_t splitmix64(std::uint64_t& state) {
  state += kGolden;
  std::uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// splitmix64's output function alone: the Feistel rounds' mixing.
std::uint64_t mix64(std::uint64_t z) {
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

SampleOrder default_sample_order(std::int64_t num_samples) {
  return num_samples > kHeldOrderMaxSamples ? SampleOrder::kKeyed : SampleOrder::kHeld;
}

const char* sample_order_name(SampleOrder order) {
  return order == SampleOrder::kKeyed ? "keyed" : "held";
}

KeyedPermutation::KeyedPermutation(std::int64_t num_samples, std::uint64_t seed, std::int64_t epoch)
    : n_(static_cast<std::uint64_t>(std::max<std::int64_t>(num_samples, 1))) {
  int bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < n_) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t state = seed ^ (static_cast<std::uint64_t>(epoch) * kEpochMix) ^ kKeyedMix;
  for (auto& key : keys_) key = splitmix64(state);
}

std::int64_t KeyedPermutation::operator()(std::int64_t position) const {
  auto x = static_cast<std::uint64_t>(position);
  // Cycle walking: the network permutes [0, 2^bits), at most 4n values; repeating it until the
  // value is below n permutes [0, n) (x's cycle returns below n, at x itself at the latest).
  do {
    std::uint64_t left = x >> half_bits_;
    std::uint64_t right = x & half_mask_;
    for (const std::uint64_t key : keys_) {
      const std::uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= n_);
  return static_cast<std::int64_t>(x);
}

std::uint64_t source_seed(std::uint64_t seed, std::size_t source) {
  return seed ^ ((static_cast<std::uint64_t>(source) + 1) * kSourceMix);
}

TrainSampler::TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
                           bool shuffle)
    : TrainSampler(num_samples, global_batch, seed, shuffle, default_sample_order(num_samples)) {}

TrainSampler::TrainSampler(std::int64_t num_samples, std::int64_t global_batch, std::uint64_t seed,
                           bool shuffle, SampleOrder order, std::vector<SamplerSource> sources)
    : num_samples_(num_samples),
      global_batch_(global_batch),
      seed_(seed),
      shuffle_(shuffle),
      order_(order),
      sources_(std::move(sources)) {
  if (global_batch < 1) {
    throw ConfigError(
        str("global batch ", global_batch, " must be at least 1: check data.batch_size"));
  }
  if (sources_.size() < 2) sources_.clear();
  if (!sources_.empty()) {
    double total = 0;
    for (const auto& source : sources_) {
      if (!(source.weight > 0) || !std::isfinite(source.weight) || source.count < 1) {
        throw ConfigError(str("mixture source '", source.name, "': weight ", source.weight, " and ",
                              source.count,
                              " samples: a source needs a positive weight and samples"));
      }
      total += source.weight;
    }
    for (const auto& source : sources_) {
      source_units_.push_back(
          static_cast<std::uint64_t>(std::floor(source.weight / total * kWeightUnit + 0.5)));
    }
    source_cursors_.resize(sources_.size());
  }
  // A held order is a vector of num_samples indices: a file that declares far more samples than
  // memory holds (a damaged or hostile shape) is refused here, naming the count, instead of
  // failing later with a bare std::bad_alloc. (A keyed order needs no such memory.)
  const double order_bytes = static_cast<double>(memory_bytes());
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

std::int64_t TrainSampler::memory_bytes() const {
  auto held = [this](std::int64_t count) {
    return shuffle_ && order_ == SampleOrder::kHeld ? count * std::int64_t{8} : 0;
  };
  std::int64_t bytes = global_batch_ * 8;
  if (sources_.empty()) return bytes + held(num_samples_);
  for (const auto& source : sources_) bytes += held(source.count);
  return bytes;
}

std::int64_t TrainSampler::steps_per_epoch() const {
  return num_samples_ / global_batch_;
}

std::vector<std::int64_t> TrainSampler::epoch_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(num_samples_));
  if (!shuffle_) {
    std::iota(order.begin(), order.end(), 0);
    return order;
  }
  if (order_ == SampleOrder::kHeld) return epoch_permutation(num_samples_, seed_, epoch);
  const KeyedPermutation permutation(num_samples_, seed_, epoch);
  for (std::int64_t i = 0; i < num_samples_; ++i)
    order[static_cast<std::size_t>(i)] = permutation(i);
  return order;
}

std::int64_t TrainSampler::order_at(Cursor& cursor, std::int64_t count, std::uint64_t seed,
                                    std::int64_t epoch, std::int64_t position) const {
  if (!shuffle_) return position;
  if (order_ == SampleOrder::kKeyed) return KeyedPermutation(count, seed, epoch)(position);
  if (cursor.epoch != epoch) {
    cursor.held = epoch_permutation(count, seed, epoch);
    cursor.epoch = epoch;
  }
  return cursor.held[static_cast<std::size_t>(position)];
}

void TrainSampler::blend(SamplerState& state, std::vector<std::int64_t>* out) const {
  // Megatron-LM's blend: position p goes to the source whose count lags its share of p + 1 most
  // (ties: the first source), in exact integers: units_i (p + 1) - 2^32 consumed_i.
  const std::size_t n = sources_.size();
  const auto p0 = static_cast<unsigned __int128>(state.consumed_samples);
  for (std::int64_t k = 0; k < global_batch_; ++k) {
    const unsigned __int128 p1 = p0 + static_cast<unsigned __int128>(k) + 1;
    std::size_t best = 0;
    __int128 best_lag = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const __int128 lag = static_cast<__int128>(source_units_[i] * p1) -
                           (static_cast<__int128>(state.source_consumed[i]) << 32);
      if (i == 0 || lag > best_lag) {
        best = i;
        best_lag = lag;
      }
    }
    const SamplerSource& source = sources_[best];
    const std::int64_t draw = state.source_consumed[best]++;
    if (out != nullptr) {
      out->push_back(source.begin + order_at(source_cursors_[best], source.count,
                                             source_seed(seed_, best), draw / source.count,
                                             draw % source.count));
    }
  }
}

bool TrainSampler::at_epoch_end(const SamplerState& state) const {
  return state.offset_in_epoch + global_batch_ > num_samples_;
}

void TrainSampler::check_state(const SamplerState& state) const {
  if (state.epoch < 0 || state.offset_in_epoch < 0 || state.offset_in_epoch > num_samples_) {
    throw DataError(str("sampler state (epoch ", state.epoch, ", offset in epoch ",
                        state.offset_in_epoch, ") does not fit a training set of ", num_samples_,
                        " samples: the checkpoint was made with another dataset; point data.train "
                        "at the file it was trained on, or start a new run"));
  }
  if (!sources_.empty() && !state.source_consumed.empty() &&
      state.source_consumed.size() != sources_.size()) {
    throw DataError(str("sampler state: ", state.source_consumed.size(),
                        " mixture sources were consumed, this run's data.train has ",
                        sources_.size(), ": resume with the mixture the checkpoint was made with"));
  }
}

void TrainSampler::advance(SamplerState& state) const {
  check_state(state);
  if (!sources_.empty()) {
    if (state.source_consumed.empty()) state.source_consumed.assign(sources_.size(), 0);
    blend(state, nullptr);
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
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(global_batch_));
  if (!sources_.empty()) {
    check_state(state);
    SamplerState before = state;
    if (before.source_consumed.empty()) before.source_consumed.assign(sources_.size(), 0);
    blend(before, &out);
    advance(state);
    return out;
  }
  advance(state);
  const std::int64_t first = state.offset_in_epoch - global_batch_;
  for (std::int64_t k = 0; k < global_batch_; ++k) {
    out.push_back(order_at(cursor_, num_samples_, seed_, state.epoch, first + k));
  }
  return out;
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
