// The global sampler: a fixed, platform-independent permutation per (seed, epoch), drop_last
// training batches, position-based resume (also at another global batch), rank slices, and
// evaluation shards that cover every sample exactly once.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "hpctrain/data/sampler.hpp"
#include "test_util.hpp"

namespace hpctrain::data {
namespace {

using testing::error_of;

std::vector<std::int64_t> iota(std::int64_t n, std::int64_t first = 0) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(EpochPermutation, MatchesThePythonReference) {
  // Values printed by scripts/data_order.py: the order is part of the data format, so a change
  // here changes which samples every run trains on.
  EXPECT_EQ(epoch_permutation(10, 0, 0), (std::vector<std::int64_t>{7, 8, 3, 1, 5, 4, 2, 0, 9, 6}));
  EXPECT_EQ(epoch_permutation(10, 42, 1),
            (std::vector<std::int64_t>{7, 3, 5, 6, 2, 1, 8, 4, 9, 0}));
  auto order = epoch_permutation(100, 7, 3);
  EXPECT_EQ(std::vector<std::int64_t>(order.begin(), order.begin() + 10),
            (std::vector<std::int64_t>{85, 57, 51, 90, 38, 72, 73, 83, 87, 34}));
}

TEST(EpochPermutation, IsAPermutationAndDependsOnSeedAndEpoch) {
  for (std::int64_t n : {0, 1, 2, 3, 17, 1000}) {
    auto order = epoch_permutation(n, 5, 2);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota(n)) << "n=" << n;
    EXPECT_EQ(order, epoch_permutation(n, 5, 2)) << "deterministic";
  }
  EXPECT_NE(epoch_permutation(1000, 5, 2), epoch_permutation(1000, 5, 3));
  EXPECT_NE(epoch_permutation(1000, 5, 2), epoch_permutation(1000, 6, 2));
  EXPECT_NE(epoch_permutation(1000, 5, 2), iota(1000));
}

// Issue 18: a file declaring 10^12 samples ended in a bare std::bad_alloc naming nothing.
TEST(TrainSampler, RefusesMoreSamplesThanMemoryCanOrder) {
  try {
    TrainSampler sampler(std::int64_t{1} << 40, 32, 7, true, SampleOrder::kHeld);
    FAIL() << "a held order of 2^40 samples was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("the training set declares 1099511627776 samples"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(TrainSampler(60000, 32, 7, true));
}

TEST(KeyedPermutation, MatchesThePythonReference) {
  // python3 scripts/data_order.py --keyed N SEED EPOCH COUNT
  const KeyedPermutation small(10, 0, 0);
  std::vector<std::int64_t> order;
  for (std::int64_t i = 0; i < 10; ++i) order.push_back(small(i));
  EXPECT_EQ(order, (std::vector<std::int64_t>{1, 7, 3, 2, 6, 0, 4, 8, 5, 9}));
  const KeyedPermutation huge(1000000000, 7, 2);
  order.clear();
  for (std::int64_t i = 0; i < 8; ++i) order.push_back(huge(i));
  EXPECT_EQ(order, (std::vector<std::int64_t>{815473315, 90584630, 139037458, 317115350, 827734889,
                                              500507382, 346838894, 699428122}));
}

TEST(KeyedPermutation, IsAPermutationAndDependsOnSeedAndEpoch) {
  for (std::int64_t n : {1, 2, 3, 4, 5, 17, 1000, 4097}) {
    const KeyedPermutation p(n, 5, 2);
    std::vector<std::int64_t> order;
    for (std::int64_t i = 0; i < n; ++i) order.push_back(p(i));
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, iota(n)) << "n=" << n;
  }
  auto first = [](std::uint64_t seed, std::int64_t epoch) {
    const KeyedPermutation p(1000, seed, epoch);
    std::vector<std::int64_t> v;
    for (std::int64_t i = 0; i < 1000; ++i) v.push_back(p(i));
    return v;
  };
  EXPECT_NE(first(5, 2), first(5, 3));
  EXPECT_NE(first(5, 2), first(6, 2));
  EXPECT_NE(first(5, 2), iota(1000));
}

TEST(TrainSampler, KeyedAboveTheHeldLimitWithoutPerSampleMemory) {
  EXPECT_EQ(default_sample_order(kHeldOrderMaxSamples), SampleOrder::kHeld);
  EXPECT_EQ(default_sample_order(kHeldOrderMaxSamples + 1), SampleOrder::kKeyed);
  const std::int64_t n = 1000000000;
  TrainSampler sampler(n, 16, 7, true);
  EXPECT_EQ(sampler.order(), SampleOrder::kKeyed);
  EXPECT_EQ(sampler.memory_bytes(), 16 * 8);  // one global batch of indices, nothing per sample
  SamplerState state;
  state.epoch = 2;
  const auto batch = sampler.next_global_batch(state);
  const KeyedPermutation reference(n, 7, 2);
  for (std::int64_t k = 0; k < 16; ++k) EXPECT_EQ(batch[static_cast<std::size_t>(k)], reference(k));
  // Below the limit the order stays today's held Fisher-Yates, whatever the constructor.
  TrainSampler small(10, 10, 0, true);
  EXPECT_EQ(small.order(), SampleOrder::kHeld);
  SamplerState s0;
  EXPECT_EQ(small.next_global_batch(s0), epoch_permutation(10, 0, 0));
  // A keyed order at a small size (resumed checkpoints carry their order) is the same function.
  TrainSampler keyed(10, 10, 0, true, SampleOrder::kKeyed);
  SamplerState s1;
  EXPECT_EQ(keyed.next_global_batch(s1), (std::vector<std::int64_t>{1, 7, 3, 2, 6, 0, 4, 8, 5, 9}));
}

std::vector<SamplerSource> two_sources(std::int64_t a, std::int64_t b, double wa, double wb) {
  return {SamplerSource{"a", wa, 0, a}, SamplerSource{"b", wb, a, b}};
}

TEST(TrainSampler, MixtureMatchesThePythonReference) {
  // python3 scripts/data_order.py --mixture 10:0.7,5:0.3 3 20
  TrainSampler sampler(15, 5, 3, true, SampleOrder::kHeld, two_sources(10, 5, 0.7, 0.3));
  SamplerState state;
  std::vector<std::int64_t> stream;
  for (int s = 0; s < 4; ++s) {
    auto b = sampler.next_global_batch(state);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  EXPECT_EQ(stream, (std::vector<std::int64_t>{4, 14, 1, 3, 11, 0, 9, 5, 12, 7,
                                               6, 10, 2, 8, 13, 1, 8, 0, 10, 4}));
  EXPECT_EQ(state.source_consumed, (std::vector<std::int64_t>{14, 6}));
}

// The first `count` blend positions of `sources` (global batch 4).
std::vector<std::int64_t> blend_stream(const std::vector<SamplerSource>& sources,
                                       std::uint64_t seed, int count) {
  std::int64_t total = 0;
  for (const auto& s : sources) total += s.count;
  TrainSampler sampler(total, 4, seed, true, SampleOrder::kHeld, sources);
  SamplerState state;
  std::vector<std::int64_t> stream;
  while (static_cast<int>(stream.size()) < count) {
    auto b = sampler.next_global_batch(state);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  stream.resize(static_cast<std::size_t>(count));
  return stream;
}

TEST(TrainSampler, MixtureTiesGoToTheFirstSourceAsInThePythonReference) {
  // Equal weights tie at every other position, and the tie goes to the first of the tied
  // sources (Megatron-LM's blend); a blend that gave ties to the last source would interleave
  // b, a, b, a, ... instead. Values printed by scripts/data_order.py.
  // python3 scripts/data_order.py --mixture 6:0.5,4:0.5 5 24
  EXPECT_EQ(blend_stream(two_sources(6, 4, 0.5, 0.5), 5, 24),
            (std::vector<std::int64_t>{3, 7, 1, 9, 4, 6, 5, 8, 2, 8, 0, 6,
                                       2, 7, 0, 9, 1, 9, 4, 6, 3, 8, 5, 7}));
  // Three sources, two of them equal (ties between b and c, and between all three).
  // python3 scripts/data_order.py --mixture 6:0.25,5:0.25,4:0.5 9 24
  const std::vector<SamplerSource> quarter{{"a", 0.25, 0, 6}, {"b", 0.25, 6, 5}, {"c", 0.5, 11, 4}};
  EXPECT_EQ(blend_stream(quarter, 9, 24),
            (std::vector<std::int64_t>{13, 4, 7,  11, 14, 3, 6, 12, 12, 2, 9, 14,
                                       13, 5, 10, 11, 13, 1, 8, 14, 11, 0, 6, 12}));
  // python3 scripts/data_order.py --mixture 6:0.4,5:0.3,4:0.3 9 24
  const std::vector<SamplerSource> forty{{"a", 0.4, 0, 6}, {"b", 0.3, 6, 5}, {"c", 0.3, 11, 4}};
  EXPECT_EQ(blend_stream(forty, 9, 24),
            (std::vector<std::int64_t>{4,  7, 13, 3,  6, 11, 2,  9, 14, 5, 1,  10,
                                       12, 0, 8,  12, 4, 6,  14, 1, 3,  7, 13, 2}));
}

TEST(TrainSampler, MixtureSharesFollowTheWeightsAndSmallSourcesRepeatPerEpoch) {
  // 0.7 / 0.3 over 10,000 samples: within one sample of the weights (Megatron's greedy blend).
  TrainSampler sampler(1300, 100, 11, true, SampleOrder::kHeld, two_sources(1000, 300, 0.7, 0.3));
  SamplerState state;
  std::vector<std::int64_t> per_source(2, 0);
  std::vector<std::vector<int>> seen(2);
  seen[0].assign(1000, 0);
  seen[1].assign(300, 0);
  for (int s = 0; s < 100; ++s) {
    for (std::int64_t index : sampler.next_global_batch(state)) {
      const int source = index < 1000 ? 0 : 1;
      ++per_source[static_cast<std::size_t>(source)];
      ++seen[static_cast<std::size_t>(source)]
            [static_cast<std::size_t>(index - (source ? 1000 : 0))];
    }
  }
  EXPECT_NEAR(static_cast<double>(per_source[0]) / 10000, 0.7, 1e-4);
  EXPECT_NEAR(static_cast<double>(per_source[1]) / 10000, 0.3, 1e-4);
  EXPECT_EQ(state.source_consumed, per_source);
  // 7000 draws of a 1000-sample source: 7 whole epochs, each sample exactly 7 times; 3000 of 300:
  // each exactly 10 times (a source's epoch is a permutation: no repetition within it).
  for (int c : seen[0]) EXPECT_EQ(c, 7);
  for (int c : seen[1]) EXPECT_EQ(c, 10);
}

TEST(TrainSampler, MixtureStreamIsIndependentOfTheGlobalBatchAndResumesExactly) {
  auto stream = [](std::int64_t global_batch, int steps, SamplerState start) {
    TrainSampler sampler(120, global_batch, 5, true, SampleOrder::kHeld,
                         two_sources(100, 20, 2.0, 1.0));
    std::vector<std::int64_t> out;
    for (int s = 0; s < steps; ++s) {
      auto b = sampler.next_global_batch(start);
      out.insert(out.end(), b.begin(), b.end());
    }
    return std::make_pair(out, start);
  };
  const auto [by6, end6] = stream(6, 20, {});
  const auto [by4, end4] = stream(4, 30, {});
  EXPECT_EQ(by6, by4);
  EXPECT_EQ(end6.source_consumed, end4.source_consumed);
  // Resume after 7 steps of 6 with the saved state, continue with 2 per step.
  const auto [head, mid] = stream(6, 7, {});
  const auto [tail, unused] = stream(2, 39, mid);
  std::vector<std::int64_t> joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, by6);
  // advance() moves the blend exactly as next_global_batch does.
  TrainSampler sampler(120, 6, 5, true, SampleOrder::kHeld, two_sources(100, 20, 2.0, 1.0));
  SamplerState a, b;
  for (int s = 0; s < 9; ++s) {
    sampler.next_global_batch(a);
    sampler.advance(b);
  }
  EXPECT_EQ(a.source_consumed, b.source_consumed);
  EXPECT_EQ(a.consumed_samples, b.consumed_samples);
}

TEST(TrainSampler, SequentialWithoutShuffle) {
  TrainSampler sampler(10, 4, 123, /*shuffle=*/false);
  EXPECT_EQ(sampler.epoch_order(0), iota(10));
  EXPECT_EQ(sampler.epoch_order(5), iota(10));
  SamplerState state;
  EXPECT_EQ(sampler.next_global_batch(state), iota(4, 0));
  EXPECT_EQ(sampler.next_global_batch(state), iota(4, 4));
  // drop_last: samples 8 and 9 do not fill a batch of 4; epoch 1 starts over.
  EXPECT_EQ(sampler.next_global_batch(state), iota(4, 0));
  EXPECT_EQ(state.epoch, 1);
}

TEST(TrainSampler, NextGlobalBatchWalksTheEpochOrderWithDropLast) {
  TrainSampler sampler(10, 4, 9, true);
  EXPECT_EQ(sampler.steps_per_epoch(), 2);
  SamplerState state;
  auto e0 = sampler.epoch_order(0);
  auto e1 = sampler.epoch_order(1);
  EXPECT_EQ(e0, epoch_permutation(10, 9, 0));
  EXPECT_EQ(sampler.next_global_batch(state),
            std::vector<std::int64_t>(e0.begin(), e0.begin() + 4));
  EXPECT_EQ(state.epoch, 0);
  EXPECT_EQ(state.offset_in_epoch, 4);
  EXPECT_EQ(state.global_step, 1);
  EXPECT_EQ(state.consumed_samples, 4);
  EXPECT_EQ(sampler.next_global_batch(state),
            std::vector<std::int64_t>(e0.begin() + 4, e0.begin() + 8));
  EXPECT_TRUE(sampler.at_epoch_end(state));
  EXPECT_EQ(sampler.next_global_batch(state),
            std::vector<std::int64_t>(e1.begin(), e1.begin() + 4));
  EXPECT_EQ(state.epoch, 1);
  EXPECT_EQ(state.offset_in_epoch, 4);
  EXPECT_EQ(state.global_step, 3);
  EXPECT_EQ(state.consumed_samples, 12);
}

TEST(TrainSampler, AdvanceMatchesNextGlobalBatch) {
  TrainSampler sampler(103, 12, 1, true);
  SamplerState a, b;
  for (int i = 0; i < 40; ++i) {
    sampler.next_global_batch(a);
    sampler.advance(b);
    EXPECT_EQ(a.epoch, b.epoch);
    EXPECT_EQ(a.offset_in_epoch, b.offset_in_epoch);
    EXPECT_EQ(a.global_step, b.global_step);
    EXPECT_EQ(a.consumed_samples, b.consumed_samples);
  }
}

TEST(TrainSampler, EveryEpochSeesEachSampleOnceMinusTheRemainder) {
  const std::int64_t n = 103, g = 12;
  TrainSampler sampler(n, g, 77, true);
  SamplerState state;
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int64_t> seen;
    for (std::int64_t s = 0; s < sampler.steps_per_epoch(); ++s) {
      auto batch = sampler.next_global_batch(state);
      EXPECT_EQ(state.epoch, epoch);
      seen.insert(seen.end(), batch.begin(), batch.end());
    }
    auto order = sampler.epoch_order(epoch);
    std::set<std::int64_t> unique(seen.begin(), seen.end());
    EXPECT_EQ(unique.size(), seen.size()) << "no duplicates within an epoch";
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()), n - n % g);
    // The dropped remainder is the tail of the epoch's order.
    for (std::int64_t k = n - n % g; k < n; ++k) {
      EXPECT_EQ(unique.count(order[static_cast<std::size_t>(k)]), 0u);
    }
  }
}

TEST(TrainSampler, ResumeContinuesTheStreamAlsoAtAnotherGlobalBatch) {
  const std::int64_t n = 1000;
  TrainSampler full(n, 12, 3, true);
  SamplerState straight;
  std::vector<std::int64_t> reference;
  for (int s = 0; s < 20; ++s) {
    auto b = full.next_global_batch(straight);
    reference.insert(reference.end(), b.begin(), b.end());
  }
  // Stop after 7 steps; resume from the saved state with a fresh sampler (same global batch).
  SamplerState saved;
  for (int s = 0; s < 7; ++s) full.advance(saved);
  TrainSampler resumed(n, 12, 3, true);
  std::vector<std::int64_t> stream(reference.begin(), reference.begin() + 7 * 12);
  for (int s = 7; s < 20; ++s) {
    auto b = resumed.next_global_batch(saved);
    stream.insert(stream.end(), b.begin(), b.end());
  }
  EXPECT_EQ(stream, reference);
  EXPECT_EQ(saved.global_step, straight.global_step);

  // Resume at half the data-parallel size (global batch 6): the same samples, in the same order.
  SamplerState half;
  for (int s = 0; s < 7; ++s) full.advance(half);
  TrainSampler smaller(n, 6, 3, true);
  std::vector<std::int64_t> continued(reference.begin(), reference.begin() + 7 * 12);
  while (continued.size() < reference.size()) {
    auto b = smaller.next_global_batch(half);
    continued.insert(continued.end(), b.begin(), b.end());
  }
  EXPECT_EQ(continued, reference);
  EXPECT_EQ(half.consumed_samples, straight.consumed_samples);
}

TEST(TrainSampler, RejectsTooFewSamplesAndForeignStates) {
  EXPECT_HAS(error_of([] { TrainSampler(10, 12, 0, true); }),
             "holds 10 samples, fewer than one global batch of 12");
  EXPECT_HAS(error_of<ConfigError>([] { TrainSampler(10, 0, 0, true); }), "data.batch_size");
  TrainSampler sampler(10, 4, 0, true);
  SamplerState foreign;
  foreign.offset_in_epoch = 50;
  EXPECT_HAS(error_of([&] { sampler.next_global_batch(foreign); }),
             "does not fit a training set of 10 samples");
}

TEST(TrainSampler, RankSliceIsContiguous) {
  auto global = iota(12, 100);
  EXPECT_EQ(TrainSampler::rank_slice(global, 0, 3), iota(4, 100));
  EXPECT_EQ(TrainSampler::rank_slice(global, 2, 3), iota(4, 108));
  EXPECT_EQ(TrainSampler::rank_slice(global, 0, 1), global);
  EXPECT_HAS(error_of<Error>([&] { TrainSampler::rank_slice(global, 0, 5); }),
             "cannot take an equal slice of a global batch of 12");
}

TEST(EvalShard, CoversEverySampleExactlyOnceWithUnevenShards) {
  for (std::int64_t n : {0, 1, 3, 5, 7, 100, 103}) {
    for (int dp = 1; dp <= 8; ++dp) {
      for (std::int64_t batch : {1, 3, 64}) {
        std::vector<int> hits(static_cast<std::size_t>(n), 0);
        std::int64_t smallest = n, largest = 0, most_batches = 0;
        for (int r = 0; r < dp; ++r) {
          EvalShard shard(n, r, dp, batch);
          smallest = std::min(smallest, shard.size());
          largest = std::max(largest, shard.size());
          most_batches = std::max(most_batches, shard.num_batches());
          std::int64_t count = 0;
          for (std::int64_t i = 0; i < shard.num_batches(); ++i) {
            auto indices = shard.batch(i);
            EXPECT_LE(static_cast<std::int64_t>(indices.size()), batch);
            EXPECT_GT(indices.size(), 0u);
            for (auto index : indices) {
              ASSERT_GE(index, shard.begin());
              ASSERT_LT(index, shard.end());
              ++hits[static_cast<std::size_t>(index)];
            }
            count += static_cast<std::int64_t>(indices.size());
          }
          EXPECT_EQ(count, shard.size());
          EXPECT_EQ(shard.max_batches_over_ranks(),
                    EvalShard(n, 0, dp, batch).max_batches_over_ranks());
        }
        for (std::int64_t i = 0; i < n; ++i) {
          EXPECT_EQ(hits[static_cast<std::size_t>(i)], 1)
              << "n=" << n << " dp=" << dp << " i=" << i;
        }
        EXPECT_LE(largest - smallest, 1) << "n=" << n << " dp=" << dp;
        EXPECT_EQ(EvalShard(n, 0, dp, batch).max_batches_over_ranks(), most_batches)
            << "n=" << n << " dp=" << dp << " batch=" << batch;
      }
    }
  }
}

TEST(EvalShard, RejectsBadArguments) {
  EXPECT_HAS(error_of<ConfigError>([] { EvalShard(10, 0, 2, 0); }), "at least 1");
  EXPECT_HAS(error_of<ConfigError>([] { EvalShard(10, 2, 2, 4); }), "not a valid shard");
}

}  // namespace
}  // namespace hpctrain::data
