// The timeline recorder's deferred slices (runtime/trace.hpp): how collectives timed by events on
// a device stream are placed on the host clock, and the window asking its deferred sources for
// them. The GPU path (comm's NCCL communicator) feeds exactly these; no device is needed here.
#include <gtest/gtest.h>

#include <vector>

#include "hpctrain/runtime/trace.hpp"

namespace hpctrain::runtime::trace {
namespace {

constexpr double kReference = 1e9;  // the reference event's host time, ns
constexpr std::int64_t kMs = 1000000;

TEST(DeviceTimings, SliceRunsFromLaunchOrStreamStartToCompletion) {
  // Launched at -10 ms, started on the stream at -8 ms (waiting for backward's kernels), done at
  // -5 ms: the slice is [-8, -5]. A second one launched at -7 ms while the first was running
  // starts where the first ended (the stream runs them one by one), not at its launch.
  const std::vector<DeviceTiming> ops{
      {"all_reduce", 4096, static_cast<std::int64_t>(kReference) - 10 * kMs, 8.0, 5.0},
      {"all_reduce", 8192, static_cast<std::int64_t>(kReference) - 7 * kMs, 5.0, 2.0},
      // Launched after the stream reached its start event: begins at its launch.
      {"all_gather", 16, static_cast<std::int64_t>(kReference) - 1 * kMs, 1.5, 0.5}};
  const std::vector<Slice> slices = place_device_timings(3, ops, kReference);
  ASSERT_EQ(slices.size(), 3u);
  const auto at = [](double ms_before) {
    return static_cast<std::int64_t>(kReference - ms_before * kMs);
  };
  EXPECT_EQ(slices[0].start_ns, at(8));
  EXPECT_EQ(slices[0].end_ns, at(5));
  EXPECT_EQ(slices[1].start_ns, at(5));
  EXPECT_EQ(slices[1].end_ns, at(2));
  EXPECT_EQ(slices[2].start_ns, at(1));
  EXPECT_EQ(slices[2].end_ns, at(0.5));
  EXPECT_EQ(slices[1].lane, 3);
  EXPECT_EQ(slices[1].arg, 8192);
  EXPECT_STREQ(slices[2].name, "all_gather");
  for (std::size_t i = 1; i < slices.size(); ++i) {
    EXPECT_GE(slices[i].start_ns, slices[i - 1].end_ns) << "slices of one stream must not overlap";
  }
}

TEST(DeviceTimings, ClockRoundingNeitherOverlapsNorGoesNegative) {
  // Event times are rounded (about 0.5 us): the second collective's start read 0.1 ms before the
  // first one's end still starts where that ended; an end read before the start gives length 0.
  const std::vector<DeviceTiming> ops{
      {"all_reduce", 1, static_cast<std::int64_t>(kReference) - 9 * kMs, 8.0, 5.0},
      {"all_reduce", 1, static_cast<std::int64_t>(kReference) - 9 * kMs, 5.1, 3.0},
      {"all_reduce", 1, static_cast<std::int64_t>(kReference) - 1 * kMs, 1.2, 1.1}};
  const std::vector<Slice> slices = place_device_timings(0, ops, kReference);
  ASSERT_EQ(slices.size(), 3u);
  EXPECT_EQ(slices[1].start_ns, slices[0].end_ns);
  EXPECT_EQ(slices[1].end_ns, static_cast<std::int64_t>(kReference) - 3 * kMs);
  EXPECT_EQ(slices[2].start_ns, static_cast<std::int64_t>(kReference) - kMs);
  EXPECT_EQ(slices[2].end_ns, slices[2].start_ns);
}

class FakeSource final : public DeferredSource {
 public:
  void resolve(std::vector<Slice>& out) override {
    ++resolved;
    for (const Slice& s : held) out.push_back(s);
    held.clear();
  }
  void discard() override {
    ++discarded;
    held.clear();
  }
  std::vector<Slice> held;
  int resolved = 0;
  int discarded = 0;
};

TEST(DeferredSources, CloseAppendsTheirSlicesAndOpenDiscardsStaleOnes) {
  if (!HPCTRAIN_TRACE_HOOKS) GTEST_SKIP() << "recording points compiled out (HPCTRAIN_TRACE_HOOKS)";
  FakeSource source;
  add_source(&source);
  source.held.push_back(Slice{1, "stale", 1, 2, -1});
  open();  // a new window: what a source held from before is dropped
  EXPECT_EQ(source.discarded, 1);
  EXPECT_TRUE(source.held.empty());
  const auto now = Clock::now();
  record(0, "host", now, now);
  source.held.push_back(Slice{1, "device", 5, 9, 64});
  std::vector<Slice> slices = close();
  EXPECT_EQ(source.resolved, 1);
  ASSERT_EQ(slices.size(), 2u);
  EXPECT_STREQ(slices[0].name, "host");
  EXPECT_STREQ(slices[1].name, "device");
  EXPECT_EQ(slices[1].arg, 64);
  remove_source(&source);
  open();
  slices = close();
  EXPECT_EQ(source.resolved, 1) << "a removed source is not asked again";
  EXPECT_TRUE(slices.empty());
}

}  // namespace
}  // namespace hpctrain::runtime::trace
