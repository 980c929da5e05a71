// Hang attribution that follows waits from rank to rank (issue 44, item 5, at pp = 2): whom a
// position's operation waits for, the chain from a waiting member to the stopped rank, cycles of
// live ranks, and the operation CollectiveScope records for this rank's position; no MPI.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/position.hpp"

namespace hpctrain::runtime {
namespace {

// A wait of rank 0 in `op` #`seq` on the channel `id` over world ranks 0..3.
WaitingCollective waiting_in(std::uint64_t seq, const std::string& op = "all_reduce",
                             std::uint32_t id = 0) {
  WaitingCollective w;
  w.world_rank = 0;
  w.host = "n1";
  w.group = "dp";
  w.channel = "dp";
  w.channel_id = id;
  w.members = {0, 1, 2, 3};
  w.seq = seq;
  w.op = op;
  w.waited_s = 600;
  w.step = 120;
  return w;
}

// dp = 2 x pp = 2 as the process grid lays it out: stage 0 is world ranks 0 and 2, stage 1 ranks 1
// and 3; the pipeline pairs are (0, 1) and (2, 3); the dp groups {0, 2} and {1, 3}.
constexpr std::uint32_t kDpStage0 = 101;
constexpr std::uint32_t kDpStage1 = 102;
constexpr std::uint32_t kWorld = 103;

RankPosition stage_rank(int rank, Phase phase, std::uint64_t dp_entered, std::uint64_t dp_completed,
                        double heard_ago_s = 0.2) {
  RankPosition p;
  p.world_rank = rank;
  p.known = true;
  p.host = "n" + std::to_string(rank % 2 + 1);
  p.step = 120;
  p.phase = phase;
  p.in_phase_s = 0.1;
  p.heard_ago_s = heard_ago_s;
  p.channels.push_back(ChannelPosition{rank % 2 == 0 ? kDpStage0 : kDpStage1, "dp", dp_entered,
                                       "all_reduce", dp_completed, "all_reduce"});
  p.channels.push_back(ChannelPosition{kWorld, "world control", 240, "allreduce (control)", 240,
                                       "allreduce (control)"});
  return p;
}

OperationPosition in_send_recv(std::vector<int> peers, bool active = true) {
  OperationPosition o;
  o.known = true;
  o.active = active;
  o.channel = "pp";
  o.op = "send_recv";
  o.peers = std::move(peers);
  return o;
}

OperationPosition in_dp(std::uint32_t id, std::uint64_t seq, bool active = true) {
  OperationPosition o;
  o.known = true;
  o.active = active;
  o.channel_id = id;
  o.channel = "dp";
  o.seq = seq;
  o.op = "all_reduce";
  return o;
}

WaitingCollective pipeline_wait(int rank, int peer) {
  WaitingCollective w;
  w.world_rank = rank;
  w.host = "n1";
  w.group = "pp";
  w.channel = "pp";
  w.members = {peer};
  w.op = "send_recv";
  w.waited_s = 5;
  w.step = 120;
  return w;
}

TEST(HangChain, WaitsForFollowsPeersAndTheMembersThatHaveNotEntered) {
  std::vector<RankPosition> positions{
      stage_rank(0, Phase::kBackward, 56, 56), stage_rank(1, Phase::kBackward, 57, 56),
      stage_rank(2, Phase::kForward, 56, 56), stage_rank(3, Phase::kForward, 56, 56)};
  EXPECT_TRUE(waits_for(positions[0], positions).empty());  // in no operation
  positions[0].operation = in_send_recv({1});
  EXPECT_EQ(waits_for(positions[0], positions), std::vector<int>{1});
  positions[0].operation.active = false;  // left it
  EXPECT_TRUE(waits_for(positions[0], positions).empty());
  // Rank 1 in dp all_reduce #57 over {1, 3}: rank 3 has entered #56 only.
  positions[1].operation = in_dp(kDpStage1, 57);
  EXPECT_EQ(waits_for(positions[1], positions), std::vector<int>{3});
  positions[3].channels[0].entered = 57;  // it entered: nobody left to wait for
  EXPECT_TRUE(waits_for(positions[1], positions).empty());
  positions[3].heard_ago_s = 6;  // entered and fell silent: still waited for
  EXPECT_EQ(waits_for(positions[1], positions), std::vector<int>{3});
  // A member heard on no collective of the channel yet is known from the operation's peers.
  positions[3] = stage_rank(3, Phase::kStartup, 0, 0);
  positions[3].channels.clear();
  EXPECT_TRUE(waits_for(positions[1], positions).empty());
  positions[1].operation.peers = {1, 3};
  EXPECT_EQ(waits_for(positions[1], positions), std::vector<int>{3});
}

TEST(HangChain, APipelineWaitOnALiveStageNamesTheStoppedRankItWaitsFor) {
  // Rank 0 waits on its pipeline neighbour 1, which is alive and waits in dp all_reduce #57 for
  // rank 3, stopped (silent 4.9 s) after completing #56: the report names rank 3, not rank 1.
  std::vector<RankPosition> positions{
      stage_rank(0, Phase::kForward, 56, 56), stage_rank(1, Phase::kOptimizer, 57, 56),
      stage_rank(2, Phase::kForward, 56, 56), stage_rank(3, Phase::kBackward, 56, 56, 4.9)};
  positions[0].operation = in_send_recv({1});
  positions[1].operation = in_dp(kDpStage1, 57);
  positions[3].operation = in_dp(kDpStage1, 56, /*active=*/false);
  WaitingCollective w = pipeline_wait(0, 1);
  w.members = {1, 1};  // a send to and a receive from rank 1
  const HangAttribution a = attribute_hang(w, positions);
  EXPECT_EQ(a.not_entered, std::vector<int>{1});
  EXPECT_EQ(a.waiting, std::vector<int>{1});
  EXPECT_EQ(a.causes, std::vector<int>{3});
  EXPECT_NE(a.text.find("pp send_recv (step 120) on rank 0 on n1: waiting 5.0 s for rank 1, "
                        "which waits in dp all_reduce #57 at step 120 for rank 3 on n2, which is "
                        "in backward at step 120"),
            std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("it stopped sending heartbeats"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("; its last dp collective: all_reduce #56, completed"), std::string::npos)
      << a.text;
  // The same rank 1 stopped itself: then it is the cause, and nothing is followed.
  positions[1].heard_ago_s = 5;
  const HangAttribution b = attribute_hang(pipeline_wait(0, 1), positions);
  EXPECT_EQ(b.causes, std::vector<int>{1});
  EXPECT_TRUE(b.waiting.empty());
  EXPECT_NE(b.text.find("for rank 1 on n2, which is in optimizer at step 120"), std::string::npos)
      << b.text;
  EXPECT_NE(b.text.find("it has not entered the pp send_recv with rank 0; it had entered dp "
                        "all_reduce #57 and fell silent in it"),
            std::string::npos)
      << b.text;
}

TEST(HangChain, ACollectiveWaitFollowsAMemberIntoItsPointToPointWait) {
  // Rank 0 in dp all_reduce #57 over {0, 2}; rank 2 waits on its pipeline neighbour 3, stopped.
  std::vector<RankPosition> positions{
      stage_rank(0, Phase::kBackward, 57, 56), stage_rank(1, Phase::kBackward, 56, 56),
      stage_rank(2, Phase::kBackward, 56, 56), stage_rank(3, Phase::kForward, 56, 56, 6)};
  positions[2].operation = in_send_recv({3});
  positions[3].operation = in_dp(kDpStage1, 56, /*active=*/false);
  WaitingCollective w = waiting_in(57, "all_reduce", kDpStage0);
  w.members = {0, 2};
  HangAttribution a = attribute_hang(w, positions);
  EXPECT_EQ(a.causes, std::vector<int>{3});
  EXPECT_NE(a.text.find("waiting 10 min 00 s for rank 2, which waits in pp send_recv with rank 3 "
                        "at step 120 for rank 3 on n2, which is in forward at step 120"),
            std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("it has not entered the pp send_recv with rank 2; its last operation: dp "
                        "all_reduce #56, completed"),
            std::string::npos)
      << a.text;
  // Stopped inside the matching batch.
  positions[3].operation = in_send_recv({2});
  a = attribute_hang(w, positions);
  EXPECT_NE(a.text.find("it had entered pp send_recv with rank 2 and fell silent in it"),
            std::string::npos)
      << a.text;
  // Alive and in that batch too: a cycle of waits between live ranks, no rank to blame.
  positions[3].heard_ago_s = 0.1;
  a = attribute_hang(w, positions);
  EXPECT_TRUE(a.causes.empty());
  EXPECT_EQ(a.waiting, (std::vector<int>{2, 3}));
  EXPECT_NE(a.text.find("rank 3, which waits in pp send_recv with rank 2 at step 120 for rank 2 (a "
                        "cycle of waits between live ranks"),
            std::string::npos)
      << a.text;
}

TEST(HangChain, MembersWaitingOnADirectlyNamedRankReferToIt) {
  // World control allreduce #241: ranks 1 and 2 wait (dp, pipeline) on rank 3, which has not
  // entered it either and computes, alive: rank 3 is described once, as the cause.
  std::vector<RankPosition> positions{
      stage_rank(0, Phase::kStepEnd, 57, 57), stage_rank(1, Phase::kBackward, 57, 56),
      stage_rank(2, Phase::kBackward, 57, 57), stage_rank(3, Phase::kDataWait, 56, 56)};
  positions[0].channels[1].entered = 241;
  positions[1].operation = in_dp(kDpStage1, 57);
  positions[2].operation = in_send_recv({3});
  WaitingCollective w = waiting_in(241, "allreduce (control)", kWorld);
  w.group = "world";
  w.channel = "world control";
  const HangAttribution a = attribute_hang(w, positions);
  EXPECT_EQ(a.not_entered, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(a.waiting, (std::vector<int>{1, 2}));
  EXPECT_EQ(a.causes, std::vector<int>{3});
  EXPECT_NE(
      a.text.find("for 3 ranks: rank 1, which waits in dp all_reduce #57 at step 120 for rank "
                  "3; rank 2, which waits in pp send_recv with rank 3 at step 120 for rank 3; "
                  "rank 3 on n2, which is in data wait at step 120"),
      std::string::npos)
      << a.text;
  EXPECT_NE(a.text.find("its last world control collective: allreduce (control) #240, completed"),
            std::string::npos)
      << a.text;
}

TEST(HangChain, AStoppedRankHeardBehindTheCollectiveBeforeTheWaitedOneEnteredIt) {
  // Rank 0 waits in world control allreduce #243, having completed #242; rank 1 stopped, last
  // heard at #240: its moves into #241 and #242 never went out (stopped within the ring's send
  // gap, or starved), but it entered #242, since rank 0 completed it and an all-reduce completes
  // on no member before every member has entered it.
  std::vector<RankPosition> positions{
      stage_rank(0, Phase::kStepEnd, 57, 57), stage_rank(1, Phase::kBackward, 57, 57, 6),
      stage_rank(2, Phase::kStepEnd, 57, 57), stage_rank(3, Phase::kStepEnd, 57, 57)};
  for (int r : {0, 2, 3}) {
    positions[static_cast<std::size_t>(r)].channels[1].entered = 243;
    positions[static_cast<std::size_t>(r)].channels[1].completed = 242;
  }
  WaitingCollective w = waiting_in(243, "allreduce (control)", kWorld);
  w.group = "world";
  w.channel = "world control";
  HangAttribution a = attribute_hang(w, positions);
  EXPECT_EQ(a.causes, std::vector<int>{1});
  EXPECT_NE(a.text.find("its last world control collective: allreduce (control) #242 or later "
                        "(rank 0 completed it, and no member completes an allreduce (control) "
                        "before every member has entered it; last heard at #240: its latest "
                        "moves had not gone out when it stopped)"),
            std::string::npos)
      << a.text;
  // A broadcast completes on its root before the others enter it: nothing more is claimed.
  positions[0].channels[1].completed_op = "broadcast (control)";
  a = attribute_hang(w, positions);
  EXPECT_NE(a.text.find("its last world control collective: allreduce (control) #240, completed"),
            std::string::npos)
      << a.text;
}

TEST(HangChain, ARanksOwnPositionNamesTheOperationItHasWaitedInLongest) {
  // What CollectiveScope records for the position (PeerMonitor::positions: this rank's own when
  // the monitor is off): the oldest operation still entered, else the one left last.
  static Channel dp("dp", "", {0, 2});
  const auto operation = [] { return PeerMonitor::positions().at(0).operation; };
  {
    CollectiveScope all_reduce(&dp, "all_reduce", "dp", 64, "float32", /*watched=*/false);
    IssuedOp batch;
    batch.op = "send_recv";
    batch.group = "pp";
    batch.peers = {1};
    {
      CollectiveScope p2p(batch, /*watched=*/false);
      const OperationPosition o = operation();
      EXPECT_TRUE(o.known && o.active);
      EXPECT_EQ(o.channel_id, dp.id());
      EXPECT_EQ(describe_operation(o), "dp all_reduce #1");
    }
    std::thread other([&] {
      CollectiveScope p2p(batch, /*watched=*/false);  // another thread, entered later
      EXPECT_EQ(describe_operation(operation()), "dp all_reduce #1");
    });
    other.join();
  }
  OperationPosition o = operation();
  EXPECT_TRUE(o.known);
  EXPECT_FALSE(o.active);
  EXPECT_EQ(describe_operation(o), "dp all_reduce #1");
  IssuedOp batch;
  batch.op = "send_recv";
  batch.group = "pp";
  batch.peers = {1, 3};
  {
    CollectiveScope p2p(batch, /*watched=*/false);
    o = operation();
    EXPECT_TRUE(o.active);
    EXPECT_EQ(o.channel_id, 0u);
    EXPECT_EQ(describe_operation(o), "pp send_recv with ranks 1 and 3");
  }
  batch.peers = {1, 1};  // a send to and a receive from one neighbour: that peer once
  {
    CollectiveScope p2p(batch, /*watched=*/false);
    EXPECT_EQ(describe_operation(operation()), "pp send_recv with rank 1");
  }
  EXPECT_FALSE(operation().active);
}

}  // namespace
}  // namespace hpctrain::runtime
