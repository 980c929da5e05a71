// The Prefetcher: order, end of stream, bounded read-ahead, errors surfacing in the consumer with
// their type and message, and a prompt stop of an endless producer.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "hpctrain/data/prefetcher.hpp"
#include "test_util.hpp"

namespace hpctrain::data {
namespace {

Batch numbered(std::int64_t i) {
  Batch b;
  b.indices = {i};
  b.targets = torch::full({1}, i, torch::kLong);
  return b;
}

TEST(Prefetcher, DeliversEveryBatchInOrderThenEnds) {
  for (int depth : {0, 1, 3}) {
    Prefetcher prefetcher(
        [](std::int64_t i, Batch& out) {
          if (i >= 20) return false;
          out = numbered(i);
          return true;
        },
        depth);
    Batch b;
    for (std::int64_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(prefetcher.next(b)) << "depth " << depth;
      EXPECT_EQ(b.targets[0].item<std::int64_t>(), i);
    }
    EXPECT_FALSE(prefetcher.next(b));
    EXPECT_FALSE(prefetcher.next(b));
  }
}

TEST(Prefetcher, ReadAheadIsBounded) {
  const int depth = 3;
  std::atomic<std::int64_t> produced{0};
  std::int64_t consumed = 0;
  std::int64_t worst = 0;
  Prefetcher prefetcher(
      [&](std::int64_t i, Batch& out) {
        if (i >= 30) return false;
        out = numbered(i);
        ++produced;
        return true;
      },
      depth);
  Batch b;
  while (prefetcher.next(b)) {
    ++consumed;
    // Let the reader run as far ahead as it may.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    worst = std::max(worst, produced.load() - consumed);
  }
  EXPECT_EQ(consumed, 30);
  // At most `depth` finished batches wait, plus the one being produced.
  EXPECT_LE(worst, depth + 1);
  EXPECT_GE(worst, 1);
}

TEST(Prefetcher, ReaderErrorsSurfaceInTheConsumerWithTheirMessage) {
  for (int depth : {0, 2}) {
    Prefetcher prefetcher(
        [](std::int64_t i, Batch& out) {
          if (i == 3) throw DataError("data.train file 'x.h5', dataset /inputs: read failed");
          out = numbered(i);
          return true;
        },
        depth);
    Batch b;
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(prefetcher.next(b));
    std::string message = testing::error_of([&] { prefetcher.next(b); });
    EXPECT_EQ(message, "data.train file 'x.h5', dataset /inputs: read failed") << depth;
    // And again: the stream does not silently end after an error.
    EXPECT_FALSE(testing::error_of([&] { prefetcher.next(b); }).empty());
  }
}

TEST(Prefetcher, DestructorStopsAnEndlessProducer) {
  std::atomic<std::int64_t> produced{0};
  {
    Prefetcher prefetcher(
        [&](std::int64_t i, Batch& out) {
          out = numbered(i);
          ++produced;
          return true;
        },
        4);
    Batch b;
    ASSERT_TRUE(prefetcher.next(b));
  }
  EXPECT_LE(produced.load(), 6);
}

TEST(Prefetcher, CountsTheTimeTheConsumerWaits) {
  Prefetcher slow(
      [](std::int64_t i, Batch& out) {
        if (i >= 3) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        out = numbered(i);
        return true;
      },
      1);
  Batch b;
  while (slow.next(b)) {
  }
  EXPECT_GT(slow.wait_seconds(), 0.0);
  Prefetcher inline_reads(
      [](std::int64_t i, Batch& out) {
        if (i >= 2) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        out = numbered(i);
        return true;
      },
      0);
  while (inline_reads.next(b)) {
  }
  EXPECT_GT(inline_reads.wait_seconds(), 0.0);
}

}  // namespace
}  // namespace hpctrain::data
