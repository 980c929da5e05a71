// The peer monitor's wire format and the ring's policy (issue 41, item 5; issue 44, item 5),
// without MPI or sockets: bytes in and out of the framing, and rings of PeerRing objects whose
// messages are delivered in memory.

#include <gtest/gtest.h>

#include <deque>

#include "../../../src/runtime/peer_monitor_state.hpp"  // act(), private to src/runtime
#include "hpctrain/runtime/peer_ring.hpp"
#include "hpctrain/runtime/peer_wire.hpp"
#include "hpctrain/runtime/stop_signals.hpp"

namespace hpctrain::runtime::peer {
namespace {

constexpr std::uint64_t kToken = 0x1234abcd5678ef00ull;

PositionRecord record(int rank, std::int64_t step, std::uint8_t phase = 3,
                      std::uint32_t world_entered = 0) {
  PositionRecord r;
  r.rank = rank;
  r.step = step;
  r.phase = phase;
  r.in_phase_ms = 12;
  if (world_entered > 0) r.channels.push_back(WireChannel{77, world_entered, world_entered, 5, 5});
  return r;
}

// All whole messages in `bytes`.
std::vector<std::pair<Message, std::string>> messages(const std::string& bytes,
                                                      std::uint64_t token = kToken) {
  FrameReader reader(token);
  reader.append(bytes.data(), bytes.size());
  std::vector<std::pair<Message, std::string>> out;
  Message m;
  std::string payload;
  while (reader.next(m, payload) == FrameReader::Next::kMessage) out.emplace_back(m, payload);
  return out;
}

TEST(PeerWire, PositionsRoundTripWithTheirChannels) {
  PositionRecord a = record(3, 120, 4, 48);
  a.version = 9;
  a.channels.push_back(WireChannel{5, 7, 6, 11, 12});
  const PositionRecord b = record(1, -1, 0);
  const std::string bytes = encode_positions(2, kToken, {a, b});
  EXPECT_EQ(bytes.size(), sizeof(Message) + 2 * kPositionHeaderBytes + 2 * sizeof(WireChannel));
  const auto got = messages(bytes);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first.type, kPositions);
  EXPECT_EQ(got[0].first.from, 2u);
  EXPECT_EQ(got[0].first.detail, got[0].second.size());
  const auto records = decode_positions(got[0].second.data(), got[0].second.size());
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].rank, 3);
  EXPECT_EQ(records[0].version, 9u);
  EXPECT_EQ(records[0].step, 120);
  EXPECT_EQ(records[0].phase, 4);
  EXPECT_EQ(records[0].in_phase_ms, 12u);
  ASSERT_EQ(records[0].channels.size(), 2u);
  EXPECT_EQ(records[0].channels[1].completed, 6u);
  EXPECT_EQ(records[0].channels[1].completed_op, 12);
  EXPECT_TRUE(records[0].same_place(a));
  EXPECT_EQ(records[1].step, -1);
  EXPECT_TRUE(records[1].channels.empty());
  // A record cut short ends the list; what came before it stays.
  const auto cut = decode_positions(got[0].second.data(), got[0].second.size() - 1);
  EXPECT_EQ(cut.size(), 1u);
}

TEST(PeerWire, SamePlaceIgnoresVersionAndTimeInPhase) {
  PositionRecord a = record(1, 5, 3, 10);
  PositionRecord b = a;
  b.version = 40;
  b.in_phase_ms = 999;
  EXPECT_TRUE(a.same_place(b));
  b.channels[0].entered = 11;
  EXPECT_FALSE(a.same_place(b));
  b = a;
  b.phase = 4;
  EXPECT_FALSE(a.same_place(b));
  b = a;
  b.step = 6;
  EXPECT_FALSE(a.same_place(b));
}

TEST(PeerWire, AnOperationAndItsPeersTravelWithThePosition) {
  // A pipeline stage waiting in a point-to-point batch with world ranks 1 and 3, and one that
  // left a collective: whom a rank waits for, so a hang report can follow the wait.
  PositionRecord a = record(2, 17, 4, 30);
  a.has_operation = true;
  a.operation = WireOperation{0, 0, 901, 902, 1, 0, 0};
  a.peers = {1, 3};
  PositionRecord b = record(3, 17, 3, 30);
  b.has_operation = true;
  b.operation = WireOperation{77, 30, 5, 903, 0, 0, 0};
  const PositionRecord c = record(0, 17);  // no operation yet
  const std::string bytes = encode_positions(2, kToken, {a, b, c});
  EXPECT_EQ(bytes.size(), sizeof(Message) + 3 * kPositionHeaderBytes + 2 * sizeof(WireChannel) +
                              2 * sizeof(WireOperation) + 2 * sizeof(std::int32_t));
  const auto got = messages(bytes);
  ASSERT_EQ(got.size(), 1u);
  const auto records = decode_positions(got[0].second.data(), got[0].second.size());
  ASSERT_EQ(records.size(), 3u);
  ASSERT_TRUE(records[0].has_operation);
  EXPECT_EQ(records[0].operation.channel_id, 0u);
  EXPECT_EQ(records[0].operation.op, 901);
  EXPECT_EQ(records[0].operation.channel, 902);
  EXPECT_EQ(records[0].operation.active, 1);
  EXPECT_EQ(records[0].peers, (std::vector<std::int32_t>{1, 3}));
  EXPECT_TRUE(records[0].same_place(a));
  ASSERT_TRUE(records[1].has_operation);
  EXPECT_EQ(records[1].operation.channel_id, 77u);
  EXPECT_EQ(records[1].operation.seq, 30u);
  EXPECT_EQ(records[1].operation.active, 0);
  EXPECT_TRUE(records[1].peers.empty());
  EXPECT_FALSE(records[2].has_operation);
  EXPECT_EQ(records[2].rank, 0);
  // Cut inside the first record's peers: nothing of it is taken.
  const std::size_t first =
      kPositionHeaderBytes + sizeof(WireChannel) + sizeof(WireOperation) + 2 * sizeof(std::int32_t);
  EXPECT_EQ(decode_positions(got[0].second.data(), first - 1).size(), 0u);
  EXPECT_EQ(decode_positions(got[0].second.data(), first).size(), 1u);
  // More peers than travel: the first kMaxWirePeers.
  PositionRecord wide = a;
  wide.peers.assign(20, 5);
  std::string payload;
  encode_position(wide, payload);
  const auto back = decode_positions(payload.data(), payload.size());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].peers.size(), static_cast<std::size_t>(kMaxWirePeers));
}

TEST(PeerWire, EnteringOrLeavingAnOperationIsAMove) {
  PositionRecord a = record(1, 5, 3, 10);
  PositionRecord b = a;
  b.has_operation = true;
  b.operation.active = 1;
  EXPECT_FALSE(a.same_place(b));
  a = b;
  EXPECT_TRUE(a.same_place(b));
  b.operation.active = 0;  // left it
  EXPECT_FALSE(a.same_place(b));
  b = a;
  b.peers = {4};
  EXPECT_FALSE(a.same_place(b));
}

TEST(PeerWire, FramingSurvivesAnySplitAndSkipsStrangers) {
  std::string stream = encode(make_message(kBeat, 1, kToken));
  stream += encode(make_message(kBeat, 9, 42));  // another job's token: skipped
  Message garbled = make_message(kBye, 1, kToken);
  garbled.magic = 7;
  stream += encode(garbled);  // not a monitor message: skipped
  stream += encode_positions(1, kToken, {record(1, 33, 5, 70)});
  stream += encode(make_message(kBye, 1, kToken));
  // Byte by byte: every message comes out whole, in order, once.
  FrameReader reader(kToken);
  std::vector<std::uint32_t> types;
  Message m;
  std::string payload;
  for (char c : stream) {
    reader.append(&c, 1);
    while (reader.next(m, payload) == FrameReader::Next::kMessage) types.push_back(m.type);
  }
  EXPECT_EQ(types, (std::vector<std::uint32_t>{kBeat, kPositions, kBye}));
  EXPECT_EQ(reader.buffered(), 0u);
  // A payload larger than any of this job's breaks the stream.
  Message huge = make_message(kPositions, 1, kToken);
  huge.detail = kMaxPayload + 1;
  FrameReader broken(kToken);
  const std::string bytes = encode(huge);
  broken.append(bytes.data(), bytes.size());
  EXPECT_EQ(broken.next(m, payload), FrameReader::Next::kBroken);
}

// A ring of `n` PeerRings (link 0: successor, link 1: predecessor) whose sends are delivered in
// memory, in order, on the simulated clock.
class Ring {
 public:
  Ring(int n, double period_s, double min_gap_s, double timeout_s = 20) : now_(Clock::now()) {
    for (int r = 0; r < n; ++r) {
      PeerRing::Options o;
      o.world_rank = r;
      o.world_size = n;
      o.token = kToken;
      o.timeout_s = timeout_s;
      o.period_s = period_s;
      o.min_gap_s = min_gap_s;
      rings_.emplace_back(o, std::vector<int>{(r + 1) % n, (r + n - 1) % n}, now_);
    }
  }
  PeerRing& at(int r) { return rings_[static_cast<std::size_t>(r)]; }
  void advance(double seconds) {
    now_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  Clock::time_point now() const { return now_; }
  // Rank r's position is `p`: the ring acts on it; then every message is delivered.
  void move(int r, PositionRecord p) {
    p.rank = r;
    queue(r, at(r).on_position(p, now_));
    deliver();
  }
  void queue(int from, const Actions& a) {
    for (const Send& s : a.sends) wire_.push_back({from, s.link, s.bytes});
    if (a.loss) losses_.push_back(*a.loss);
    if (a.abort_rank >= 0) aborts_.push_back(a.abort_rank);
  }
  void deliver() {
    const int n = static_cast<int>(rings_.size());
    while (!wire_.empty()) {
      const auto [from, link, bytes] = wire_.front();
      wire_.pop_front();
      ++delivered_;
      const int to = at(from).link_peer(link);
      // To the successor it arrives on the successor's link to its predecessor, and back.
      const int in_link = to == (from + 1) % n ? 1 : 0;
      for (const auto& [m, payload] : messages(bytes))
        queue(to, at(to).on_message(in_link, m, payload, now_));
    }
  }
  int delivered() const { return delivered_; }
  std::vector<Loss> losses_;
  std::vector<int> aborts_;

 private:
  struct InFlight {
    int from;
    int link;
    std::string bytes;
  };
  Clock::time_point now_;
  std::vector<PeerRing> rings_;
  std::deque<InFlight> wire_;
  int delivered_ = 0;
};

TEST(PeerRingPolicy, EveryRankKnowsAFrozenRanksLastStepNotItsLastHeartbeat) {
  // Four ranks in lock step, 150 steps of 5 ms, heartbeat every second. Rank 2 freezes after its
  // last move (step 150, entering backward): every other rank knows step 150 and its collective,
  // not the step of its last heartbeat (step 1, 0.75 s before). Issue 44, item 5.
  Ring ring(4, /*period_s=*/1.0, /*min_gap_s=*/0.0008);
  for (int step = 1; step <= 150; ++step) {
    for (int r = 0; r < 4; ++r)
      ring.move(r, record(r, step, 3, static_cast<std::uint32_t>(2 * step)));
    ring.advance(0.005);
  }
  ring.move(2, record(2, 150, 4, 300));  // into backward, then frozen
  for (int observer : {0, 1, 3}) {
    const PeerState& p = ring.at(observer).peers()[2];
    ASSERT_TRUE(p.known);
    EXPECT_EQ(p.record.step, 150) << "rank " << observer;
    EXPECT_EQ(p.record.phase, 4) << "rank " << observer;
    ASSERT_EQ(p.record.channels.size(), 1u);
    EXPECT_EQ(p.record.channels[0].entered, 300u) << "rank " << observer;
  }
  // Rank 0's own record never comes back to it.
  EXPECT_FALSE(ring.at(0).peers()[0].known);
}

TEST(PeerRingPolicy, MovesWaitForTheGapAndBeatsComeEveryPeriod) {
  Ring ring(3, 1.0, 0.01);
  PeerRing& r0 = ring.at(0);
  const auto t0 = ring.now();
  EXPECT_EQ(r0.on_position(record(0, 1), t0).sends.size(), 2u);  // the first: to both links
  EXPECT_TRUE(r0.on_position(record(0, 1), t0).sends.empty());   // unchanged
  // A move within the gap waits: nothing now, due at the gap's end.
  EXPECT_TRUE(r0.on_position(record(0, 2), t0 + std::chrono::milliseconds(4)).sends.empty());
  EXPECT_EQ(r0.position_due(), t0 + std::chrono::milliseconds(10));
  const auto sent = r0.on_position(record(0, 2), t0 + std::chrono::milliseconds(10));
  ASSERT_EQ(sent.sends.size(), 2u);
  EXPECT_TRUE(sent.sends[0].droppable && sent.sends[0].beat_if_dropped);
  const auto got = messages(sent.sends[0].bytes);
  ASSERT_EQ(got.size(), 1u);
  const auto records = decode_positions(got[0].second.data(), got[0].second.size());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].step, 2);
  EXPECT_EQ(records[0].version, 2u);  // versions count the records sent
  // Unchanged: the heartbeat one period after the last send; a move: one gap after it.
  EXPECT_EQ(r0.position_due(), t0 + std::chrono::milliseconds(1010));
  EXPECT_EQ(r0.next_send(false), t0 + std::chrono::milliseconds(1010));
  EXPECT_EQ(r0.next_send(true), t0 + std::chrono::milliseconds(20));
  EXPECT_TRUE(r0.on_position(record(0, 2), t0 + std::chrono::milliseconds(900)).sends.empty());
  EXPECT_EQ(r0.on_position(record(0, 2), t0 + std::chrono::milliseconds(1010)).sends.size(), 2u);
}

TEST(PeerRingPolicy, NewerRecordsArePassedOnOnceAndNeverBackToTheirRank) {
  Ring ring(4, 1.0, 0);
  PeerRing& r0 = ring.at(0);  // links: 0 -> rank 1, 1 -> rank 3
  auto positions = [](std::vector<PositionRecord> records) {
    return messages(encode_positions(1, kToken, records))[0].second;
  };
  Message m = make_message(kPositions, 1, kToken);
  PositionRecord two = record(2, 10);
  two.version = 5;
  PositionRecord three = record(3, 10);
  three.version = 5;
  // From rank 1's side: rank 2's record goes on to rank 3; rank 3's record not back to rank 3.
  Actions a = r0.on_message(0, m, positions({two, three}), ring.now());
  ASSERT_EQ(a.sends.size(), 1u);
  EXPECT_EQ(a.sends[0].link, 1);
  const auto passed = messages(a.sends[0].bytes);
  const auto records = decode_positions(passed[0].second.data(), passed[0].second.size());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].rank, 2);
  EXPECT_EQ(r0.peers()[3].record.step, 10);  // kept, though not passed back
  // The same version again (the other way round the ring), or an older one: it stops here.
  EXPECT_TRUE(r0.on_message(1, m, positions({two}), ring.now()).sends.empty());
  PositionRecord old = record(2, 3);
  old.version = 4;
  EXPECT_TRUE(r0.on_message(1, m, positions({old}), ring.now()).sends.empty());
  EXPECT_EQ(r0.peers()[2].record.step, 10);
  // A record about this rank itself, or a rank outside the world, is ignored.
  PositionRecord self = record(0, 99);
  self.version = 100;
  PositionRecord stranger = record(17, 1);
  EXPECT_TRUE(r0.on_message(0, m, positions({self, stranger}), ring.now()).sends.empty());
  EXPECT_FALSE(r0.peers()[0].known);
}

TEST(PeerRingPolicy, SilenceAndClosesAreLossesUnlessTheNeighbourSaidGoodbye) {
  Ring ring(3, 1.0, 0, /*timeout_s=*/5);
  PeerRing& r0 = ring.at(0);  // links: 0 -> rank 1, 1 -> rank 2
  ring.advance(4);
  r0.heard(0, ring.now());
  ring.advance(2);  // rank 1 heard 2 s ago, rank 2 never since the start 6 s ago
  auto loss = r0.check_silence(ring.now()).loss;
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->lost_rank, 2);
  EXPECT_EQ(loss->reported_by, 0);
  EXPECT_EQ(loss->reason, kSilent);
  EXPECT_NEAR(loss->silent_s, 6, 1e-6);
  // Stopped itself (the loop ran late): the silence was its own.
  r0.stalled(ring.now());
  EXPECT_FALSE(r0.check_silence(ring.now()).loss);
  // A close without a goodbye is a loss; after kBye it is not, nor is the silence.
  EXPECT_EQ(r0.on_closed(0).loss->reason, kClosed);
  r0.on_message(0, make_message(kBye, 1, kToken), "", ring.now());
  EXPECT_TRUE(r0.link_finished(0));
  EXPECT_FALSE(r0.on_closed(0).loss);
  ring.advance(60);
  r0.heard(1, ring.now());
  EXPECT_FALSE(r0.check_silence(ring.now()).loss);
  // Nothing more goes to a neighbour that left.
  EXPECT_EQ(r0.broadcast(make_message(kHang, 0, kToken)).sends.size(), 1u);
  // A neighbour's kLost is this rank's loss too, reported by that neighbour.
  Message lost = make_message(kLost, 2, kToken);
  lost.subject = 1;
  lost.detail = kClosed;
  loss = r0.on_message(1, lost, "", ring.now()).loss;
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->lost_rank, 1);
  EXPECT_EQ(loss->reported_by, 2);
}

// After an error every rank agreed on, a neighbour's close is that neighbour ending with the same
// code, whether or not its goodbye came first: no loss is reported (e2e_agreed_startup saw
// "lost rank 1 ... closed without a goodbye" and exit 5 instead of the agreed 2). In a child
// process: the agreed code is process-wide, and a loss ends the process.
TEST(PeerMonitorLoss, AfterAnAgreedErrorAClosedNeighbourIsNoLoss) {
  Actions closed;
  closed.loss = Loss{1, 0, kClosed, 0};
  EXPECT_EXIT(
      {
        hpctrain::runtime::note_agreed_exit(2);
        act(closed);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(PeerRingPolicy, AnAbortEndsEveryWatchAndGoesRoundOnce) {
  // Rank 1 of 4 ends the job with exit 2. Its neighbours tell the others; every rank names it,
  // and no rank reports a loss when the launcher's kills close the connections.
  Ring ring(4, 1.0, 0);
  Message abort = make_message(kAbort, 1, kToken);
  abort.subject = 1;
  abort.detail = 2;
  ring.queue(1, ring.at(1).broadcast(abort));
  ring.deliver();
  EXPECT_EQ(ring.aborts_.size(), 3u);  // ranks 0, 2 and 3 each noted it once
  for (int r : {0, 2, 3}) {
    EXPECT_TRUE(ring.at(r).job_ending()) << r;
    for (int link = 0; link < 2; ++link) EXPECT_FALSE(ring.at(r).on_closed(link).loss) << r;
    Message lost = make_message(kLost, (r + 1) % 4, kToken);
    lost.subject = 1;
    EXPECT_FALSE(ring.at(r).on_message(0, lost, "", ring.now()).loss) << r;
  }
  // Rank 3 is two hops from rank 1 one way and one hop the other: the abort reached it once
  // and went no further (each rank passes it on once, never back to rank 1).
  EXPECT_LE(ring.delivered(), 5);
}

TEST(PeerRingPolicy, HangClaimsAndDumpRequestsFloodOncePerOrigin) {
  Ring ring(4, 1.0, 0);
  PeerRing& r0 = ring.at(0);  // links: 0 -> rank 1, 1 -> rank 3
  Actions a = r0.on_message(0, make_message(kHang, 2, kToken), "", ring.now());
  EXPECT_TRUE(a.dump_for_hang);
  ASSERT_EQ(a.sends.size(), 1u);
  EXPECT_EQ(a.sends[0].link, 1);
  EXPECT_EQ(r0.hang_claim(), 2);
  EXPECT_TRUE(r0.on_message(1, make_message(kHang, 2, kToken), "", ring.now()).sends.empty());
  // A claim from rank 3 arriving from rank 1's side does not go back to rank 3.
  a = r0.on_message(0, make_message(kHang, 3, kToken), "", ring.now());
  EXPECT_TRUE(a.sends.empty());
  EXPECT_EQ(r0.hang_claim(), 2);  // the lowest claimant
  r0.on_message(0, make_message(kHang, 1, kToken), "", ring.now());
  EXPECT_EQ(r0.hang_claim(), 1);
  // Flight files: counted once per rank.
  r0.on_message(0, make_message(kDumped, 2, kToken), "", ring.now());
  r0.on_message(1, make_message(kDumped, 2, kToken), "", ring.now());
  EXPECT_EQ(r0.dumps_seen(), 1);
  // SIGUSR2 requests: each new number once.
  Message request = make_message(kDumpRequest, 2, kToken);
  request.detail = 1;
  EXPECT_TRUE(r0.on_message(0, request, "", ring.now()).dump_requested);
  EXPECT_FALSE(r0.on_message(1, request, "", ring.now()).dump_requested);
  request.detail = 2;
  EXPECT_TRUE(r0.on_message(1, request, "", ring.now()).dump_requested);
}

TEST(PeerRingPolicy, FreshPeersCountsRanksHeardRecently) {
  Ring ring(3, 1.0, 0);
  for (int r = 0; r < 3; ++r) ring.move(r, record(r, 1));
  EXPECT_EQ(ring.at(0).fresh_peers(ring.now(), 3.0), 2);
  ring.advance(2);
  ring.move(1, record(1, 2));
  ring.advance(2);
  EXPECT_EQ(ring.at(0).fresh_peers(ring.now(), 3.0), 1);  // rank 2 last heard 4 s ago
}

}  // namespace
}  // namespace hpctrain::runtime::peer
