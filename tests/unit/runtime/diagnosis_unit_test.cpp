// Hang attribution from positions (runtime/hang_attribution.hpp) and the flight recorder's ring
// and file (runtime/flight_recorder.hpp), without MPI: the watchdog and `hpctrain trace flight`
// print what attribute_hang says, so every case it names is pinned here.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/position.hpp"

namespace hpctrain::runtime {
namespace {

constexpr std::uint32_t kDp = 77;

RankPosition at(int rank, Phase phase, std::uint64_t entered, const std::string& op,
                std::uint64_t completed, double heard_ago_s = 0.2) {
  RankPosition p;
  p.world_rank = rank;
  p.known = true;
  p.host = "n" + std::to_string(rank / 2 + 1);
  p.step = 120;
  p.phase = phase;
  p.in_phase_s = 3.0;
  p.heard_ago_s = heard_ago_s;
  p.channels.push_back(ChannelPosition{kDp, "dp", entered, op, completed, op});
  return p;
}

WaitingCollective waiting_in(std::uint64_t seq, const std::string& op = "all_reduce") {
  WaitingCollective w;
  w.world_rank = 0;
  w.host = "n1";
  w.group = "dp";
  w.channel = "dp";
  w.channel_id = kDp;
  w.members = {0, 1, 2, 3};
  w.seq = seq;
  w.op = op;
  w.waited_s = 600;
  w.step = 120;
  return w;
}

TEST(HangAttribution, NamesTheRankThatHasNotEnteredAndWhereItIs) {
  const std::vector<RankPosition> positions{at(0, Phase::kBackward, 4812, "all_reduce", 4811),
                                            at(1, Phase::kBackward, 4812, "all_reduce", 4811),
                                            at(2, Phase::kBackward, 4812, "all_reduce", 4811),
                                            at(3, Phase::kDataWait, 4811, "all_reduce", 4811)};
  const HangAttribution a = attribute_hang(waiting_in(4812), positions);
  EXPECT_EQ(a.not_entered, std::vector<int>{3});
  EXPECT_TRUE(a.desynchronised.empty());
  EXPECT_NE(a.text.find("dp all_reduce #4812 (step 120)"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("waiting 10 min 00 s for rank 3 on n2, which is in data wait at step 120"),
            std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("its last dp collective: all_reduce #4811, completed"), std::string::npos)
      << a.text;
  EXPECT_EQ(a.text.find("desynchronised"), std::string::npos) << a.text;
}

TEST(HangAttribution, SeveralRanksBehindAreEachNamed) {
  const std::vector<RankPosition> positions{at(0, Phase::kBackward, 10, "all_reduce", 9),
                                            at(1, Phase::kForward, 9, "all_reduce", 9),
                                            at(2, Phase::kBackward, 10, "all_reduce", 9),
                                            at(3, Phase::kCheckpointSave, 8, "all_reduce", 8)};
  const HangAttribution a = attribute_hang(waiting_in(10), positions);
  EXPECT_EQ(a.not_entered, (std::vector<int>{1, 3}));
  EXPECT_NE(a.text.find("for 2 ranks: rank 1 on n1, which is in forward"), std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("rank 3 on n2, which is in checkpoint save"), std::string::npos) << a.text;
}

TEST(HangAttribution, DifferentCollectiveAtTheSameNumberIsDesynchronised) {
  const std::vector<RankPosition> positions{
      at(0, Phase::kStepEnd, 285, "allreduce (control)", 284),
      at(1, Phase::kStepEnd, 285, "barrier (control)", 284),
      at(2, Phase::kStepEnd, 285, "allreduce (control)", 284),
      at(3, Phase::kStepEnd, 285, "allreduce (control)", 284)};
  const HangAttribution a = attribute_hang(waiting_in(285, "allreduce (control)"), positions);
  EXPECT_EQ(a.desynchronised, std::vector<int>{1});
  EXPECT_TRUE(a.not_entered.empty());
  EXPECT_NE(a.text.find("desynchronised program: rank 1 on n1 entered barrier (control) #285 "
                        "where rank 0 entered allreduce (control) #285"),
            std::string::npos)
      << a.text;
}

TEST(HangAttribution, ARankPastTheNumberIsDesynchronised) {
  // Rank 2 completed #7 (it matched another call) while rank 0 still waits in it.
  const std::vector<RankPosition> positions{
      at(0, Phase::kStepEnd, 7, "all_reduce", 6), at(1, Phase::kStepEnd, 7, "all_reduce", 6),
      at(2, Phase::kStepEnd, 9, "all_reduce", 8), at(3, Phase::kStepEnd, 7, "all_reduce", 6)};
  const HangAttribution a = attribute_hang(waiting_in(7), positions);
  EXPECT_EQ(a.desynchronised, std::vector<int>{2});
  EXPECT_NE(a.text.find("rank 2 on n2 is ahead, at all_reduce #9"), std::string::npos) << a.text;
  // Unless a member entered it and fell silent: its part reached rank 2 before it stopped.
  std::vector<RankPosition> stopped = positions;
  stopped[3].heard_ago_s = 6;
  const HangAttribution b = attribute_hang(waiting_in(7), stopped);
  EXPECT_TRUE(b.desynchronised.empty()) << b.text;
  EXPECT_EQ(b.silent, std::vector<int>{3});
  EXPECT_EQ(b.text.find("desynchronised"), std::string::npos) << b.text;
}

TEST(HangAttribution, SendersPastARootedCollectiveAreNotDesynchronised) {
  // Rank 0 roots gather (control) #36; ranks 2 and 3 sent their parts and went on; rank 1 never
  // entered it. Only rank 1 holds it up (a gather's senders finish before its root).
  const std::vector<RankPosition> positions{at(0, Phase::kStepEnd, 36, "gather (control)", 35),
                                            at(1, Phase::kStepEnd, 35, "allreduce (control)", 35),
                                            at(2, Phase::kStepEnd, 37, "allreduce (control)", 36),
                                            at(3, Phase::kStepEnd, 37, "allreduce (control)", 36)};
  const HangAttribution a = attribute_hang(waiting_in(36, "gather (control)"), positions);
  EXPECT_TRUE(a.desynchronised.empty()) << a.text;
  EXPECT_EQ(a.not_entered, std::vector<int>{1});
  EXPECT_EQ(a.text.find("desynchronised"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("for rank 1 on n1"), std::string::npos) << a.text;
  // In an all-reduce nobody finishes without every member: that is a desynchronised program.
  const HangAttribution b = attribute_hang(waiting_in(36, "allreduce (control)"), positions);
  EXPECT_EQ(b.desynchronised, (std::vector<int>{2, 3})) << b.text;
}

TEST(HangAttribution, ARankThatEnteredAndFellSilentIsNamed) {
  // Stopped (SIGSTOP) inside the collective: it entered, but its part never comes.
  const std::vector<RankPosition> positions{
      at(0, Phase::kBackward, 61, "all_reduce", 60), at(1, Phase::kBackward, 61, "all_reduce", 60),
      at(2, Phase::kBackward, 61, "all_reduce", 60),
      at(3, Phase::kBackward, 61, "all_reduce", 60, /*heard_ago_s=*/6.5)};
  const HangAttribution a = attribute_hang(waiting_in(61), positions);
  EXPECT_EQ(a.silent, std::vector<int>{3});
  EXPECT_NE(a.text.find("rank 3 on n2, which is in backward at step 120 since 9.5 s (last heard "
                        "6.5 s ago: it stopped sending heartbeats"),
            std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("it had entered all_reduce #61 and fell silent in it"), std::string::npos)
      << a.text;
}

TEST(HangAttribution, UnknownPositionsAndAStuckTransportAreSaidSo) {
  std::vector<RankPosition> positions{at(0, Phase::kBackward, 5, "all_reduce", 4)};
  HangAttribution a = attribute_hang(waiting_in(5), positions);
  EXPECT_EQ(a.unknown, (std::vector<int>{1, 2, 3}));
  EXPECT_NE(a.text.find("position unknown for ranks 1, 2 and 3"), std::string::npos) << a.text;

  positions = {
      at(0, Phase::kBackward, 5, "all_reduce", 4), at(1, Phase::kBackward, 5, "all_reduce", 4),
      at(2, Phase::kBackward, 5, "all_reduce", 4), at(3, Phase::kBackward, 5, "all_reduce", 4)};
  a = attribute_hang(waiting_in(5), positions);
  EXPECT_TRUE(a.not_entered.empty() && a.desynchronised.empty() && a.unknown.empty());
  EXPECT_NE(a.text.find("every rank of the dp group has entered it"), std::string::npos) << a.text;
}

TEST(Position, PhaseNamesRoundTrip) {
  for (int i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    EXPECT_EQ(phase_from_name(phase_name(phase)), phase) << phase_name(phase);
  }
  position::set_phase(Phase::kOptimizer);
  {
    PhaseScope scope(Phase::kCheckpointSave);
    EXPECT_EQ(position::phase(), Phase::kCheckpointSave);
  }
  EXPECT_EQ(position::phase(), Phase::kOptimizer);
}

TEST(Channel, NumbersInIssueOrderAndTheIdDependsOnNameAndMembers) {
  Channel a("dp", "", {0, 1, 2, 3});
  Channel b("dp", "control", {0, 1, 2, 3});
  Channel c("dp", "", {0, 2});
  EXPECT_EQ(a.name(), "dp");
  EXPECT_EQ(b.name(), "dp control");
  EXPECT_NE(a.id(), b.id());
  EXPECT_NE(a.id(), c.id());
  EXPECT_EQ(a.id(), Channel("dp", "", {0, 1, 2, 3}).id());
  EXPECT_EQ(a.issue(), 1u);
  EXPECT_EQ(a.issue(), 2u);
  a.enter(2, "all_reduce");
  a.complete(2, "all_reduce");
  a.complete(1, "all_reduce");  // late: never moves back
  EXPECT_EQ(a.snapshot().completed, 2u);
  EXPECT_EQ(op_name(op_code("all_reduce")), "all_reduce");
}

TEST(FlightRecorder, KeepsTheLastRecordsAndWritesThemAsJson) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "hpctrain-flight-unit-test").string();
  std::filesystem::remove_all(dir);
  FlightRecorder::configure(5);
  FlightRecorder::set_directory(dir, 0, "hostA");
  Channel* dp = new Channel("dp", "", {0});  // records keep the pointer: never freed
  for (int i = 0; i < 7; ++i) {
    CollectiveScope op(dp, "all_reduce", "dp", 1024 * (i + 1), "float32");
  }
  const IssuedOp queued = issue_op(dp, "all_gather", "dp", 64, "bfloat16");
  (void)queued;
  const std::string path = FlightRecorder::dump(DumpReason::kSignal);
  ASSERT_EQ(path, dir + "/rank-0.json");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str());
  EXPECT_EQ(j["format"], "hpctrain-flight-1");
  EXPECT_EQ(j["reason"], "SIGUSR2");
  EXPECT_EQ(j["host"], "hostA");
  const auto& records = j["records"];
  ASSERT_EQ(records.size(), 5u);  // the ring keeps the last five of eight
  EXPECT_EQ(records[0]["seq"], 4);
  EXPECT_EQ(records[0]["bytes"], 4096);
  EXPECT_EQ(records[0]["state"], "completed");
  EXPECT_EQ(records[0]["dtype"], "float32");
  EXPECT_TRUE(records[0]["ended"].is_number());
  EXPECT_EQ(records[4]["op"], "all_gather");
  EXPECT_EQ(records[4]["state"], "queued");
  EXPECT_TRUE(records[4]["started"].is_null());
  FlightRecorder::configure(0);  // off: nothing recorded, numbering goes on
  EXPECT_EQ(issue_op(dp, "barrier", "dp", 0).record, -1);
  EXPECT_EQ(dp->snapshot().issued, 9u);
  FlightRecorder::configure(FlightRecorder::kDefaultRecords);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpctrain::runtime
