// The straggler detector's rule (train/straggler_detector.hpp): per interval, a rank whose time
// per step exceeds the ranks' (lower) median by the threshold and by more than 5% of the step is
// slow; slow for `intervals` intervals in a row, it is named, once per streak.
#include <gtest/gtest.h>

#include <vector>

#include "hpctrain/train/straggler_detector.hpp"

namespace hpctrain::train {
namespace {

TEST(StragglerDetector, NamesARankSlowForTheGivenIntervalsInARow) {
  StragglerDetector d(1.2, 3);
  const std::vector<double> slow{0.10, 0.10, 0.15, 0.10};  // rank 2 1.5x
  const std::vector<double> no_wait{0, 0, 0, 0};
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  auto named = d.add(slow, no_wait, 0.2);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_EQ(named[0].which, "compute");
  EXPECT_TRUE(named[0].named_now);
  EXPECT_DOUBLE_EQ(named[0].median, 0.10);
  EXPECT_EQ(named[0].intervals, 3);
  named = d.add(slow, no_wait, 0.2);  // still slow: reported, not named again
  ASSERT_EQ(named.size(), 1u);
  EXPECT_FALSE(named[0].named_now);
  const auto summary = d.summary();
  EXPECT_EQ(summary["named"].size(), 0u);  // observe() records names; add() only judges
  EXPECT_DOUBLE_EQ(summary["compute_spread"]["max"].get<double>(), 1.5);
}

TEST(StragglerDetector, AnIntervalAtTheMedianBreaksTheStreak) {
  StragglerDetector d(1.2, 3);
  const std::vector<double> slow{0.10, 0.13, 0.10};
  const std::vector<double> even{0.10, 0.10, 0.10};
  const std::vector<double> no_wait{0, 0, 0};
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  EXPECT_TRUE(d.add(even, no_wait, 0.2).empty());
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  EXPECT_TRUE(d.add(slow, no_wait, 0.2).empty());
  EXPECT_EQ(d.add(slow, no_wait, 0.2).size(), 1u);
}

TEST(StragglerDetector, BelowTheThresholdOrTheNoiseFloorIsNotSlow) {
  StragglerDetector d(1.2, 1);
  const std::vector<double> no_wait{0, 0, 0, 0};
  // 1.15x the median: under the threshold.
  EXPECT_TRUE(d.add({0.100, 0.115, 0.100, 0.100}, no_wait, 0.2).empty());
  // A data wait of 3 ms against 1 ms is three times the median but 1% of a 200 ms step.
  EXPECT_TRUE(d.add({0.1, 0.1, 0.1, 0.1}, {0.001, 0.001, 0.003, 0.001}, 0.2).empty());
  // 50 ms against 1 ms of a 200 ms step: named, as data wait.
  const auto named = d.add({0.1, 0.1, 0.1, 0.1}, {0.001, 0.001, 0.050, 0.001}, 0.2);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 2);
  EXPECT_EQ(named[0].which, "data wait");
}

TEST(StragglerDetector, TwoRanksCompareTheSlowOneWithTheFastOne) {
  // The lower median: with two ranks, 1.3x the faster one is slow (against their mean, 1.13x).
  StragglerDetector d(1.2, 1);
  const auto named = d.add({0.10, 0.13}, {0, 0}, 0.2);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].rank, 1);
}

}  // namespace
}  // namespace hpctrain::train
