// The peer monitor's thread: the ring's policy (peer_ring.hpp) driven by one thread over the
// transport's connections (peer_transport.hpp), started over MPI, and the process-level
// consequences (a lost rank ends this process, hang claims and flight files).

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/peer_ring.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "operation_tracker.hpp"
#include "peer_monitor_state.hpp"
#include "position_listener.hpp"

namespace hpctrain::runtime::peer {
namespace {

MonitorState& state() {
  return monitor_state();
}

}  // namespace

MonitorState& monitor_state() {
  static MonitorState s;
  return s;
}

std::int64_t now_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Called by position.hpp after every move of this rank (the training thread, a communication
// thread): wakes the monitor thread once, so that the move goes out now, not at the next beat.
void wake_monitor() {
  MonitorState& s = state();
  if (s.wake[1] >= 0 && !s.wake_pending.exchange(true, std::memory_order_acq_rel)) {
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(s.wake[1], &byte, 1);
  }
}

namespace {

std::string describe_rank(int world_rank) {
  const MonitorState& s = state();
  if (world_rank < 0 || world_rank >= static_cast<int>(s.endpoints.size()))
    return str("rank ", world_rank);
  const Endpoint& e = s.endpoints[static_cast<std::size_t>(world_rank)];
  std::string where = str("rank ", world_rank, " (host ", std::string(e.node));
  if (e.address_count > 0) where += str(", ", ip_text(e.addresses[0]));
  return where + ")";
}

// Queues the sends of `actions`. Caller holds no lock.
void send(const Actions& actions) {
  MonitorState& s = state();
  if (actions.sends.empty()) return;
  std::lock_guard<std::timed_mutex> lock(s.send_mutex);
  for (const Send& out : actions.sends) {
    Connection& c = s.connections[static_cast<std::size_t>(out.link)];
    if (!c.queue(out.bytes, out.droppable) && out.beat_if_dropped) {
      // A position dropped for a full outbox: at least a heartbeat.
      c.queue(encode(make_message(kBeat, s.world_rank, s.token)), true);
    }
  }
}

// This rank's position now, for the ring.
PositionRecord own_position() {
  PositionRecord p;
  p.step = position::step();
  p.phase = static_cast<std::uint8_t>(position::phase());
  p.in_phase_ms = static_cast<std::uint32_t>(
      std::clamp<std::int64_t>((now_ns() - position::phase_started_ns()) / 1000000, 0, 4000000000));
  for (Channel* c : channels()) {
    if (c->entered() == 0 || static_cast<int>(p.channels.size()) == kMaxWireChannels) continue;
    WireChannel w;
    w.id = c->id();
    w.entered = static_cast<std::uint32_t>(c->entered());
    w.completed = static_cast<std::uint32_t>(c->completed());
    w.entered_op = op_code(c->entered_op());
    w.completed_op = op_code(c->completed_op());
    p.channels.push_back(w);
  }
  const OperationPosition o = current_operation();
  if (o.known) {
    p.has_operation = true;
    p.operation.channel_id = o.channel_id;
    p.operation.seq = static_cast<std::uint32_t>(o.seq);
    p.operation.op = op_code(o.op.c_str());
    p.operation.channel = op_code(o.channel.c_str());
    p.operation.active = o.active ? 1 : 0;
    p.peers.assign(o.peers.begin(), o.peers.end());
  }
  return p;
}

}  // namespace

RankPosition to_rank_position(int world_rank, const PeerState& p, Clock::time_point now) {
  const MonitorState& s = state();
  RankPosition q;
  q.world_rank = world_rank;
  if (world_rank < static_cast<int>(s.endpoints.size()))
    q.host = s.endpoints[static_cast<std::size_t>(world_rank)].node;
  q.known = p.known;
  if (!p.known) return q;
  q.step = p.record.step;
  q.phase = static_cast<Phase>(p.record.phase);
  q.in_phase_s = p.record.in_phase_ms / 1000.0;
  q.heard_ago_s = std::chrono::duration<double>(now - p.heard).count();
  for (const WireChannel& c : p.record.channels) {
    Channel* known = channel_by_id(c.id);
    q.channels.push_back(ChannelPosition{c.id, known ? known->name() : std::string(), c.entered,
                                         op_name(c.entered_op), c.completed,
                                         op_name(c.completed_op)});
  }
  if (p.record.has_operation) {
    const WireOperation& o = p.record.operation;
    q.operation.known = true;
    q.operation.active = o.active != 0;
    q.operation.channel_id = o.channel_id;
    q.operation.channel = op_name(o.channel);
    q.operation.seq = o.seq;
    q.operation.op = op_name(o.op);
    q.operation.peers.assign(p.record.peers.begin(), p.record.peers.end());
  }
  return q;
}

namespace {

// "step 120, in backward for 1.2 s when last heard 4.1 s ago; dp all_reduce #48 entered, #47
// completed" for messages about a rank that was lost.
std::string last_position(int world_rank) {
  MonitorState& s = state();
  std::unique_lock<std::mutex> lock(s.ring_mutex, std::try_to_lock);  // never hang an ending
  if (!lock.owns_lock() || !s.ring || world_rank < 0 || world_rank >= s.world_size) return "";
  const PeerState& p = s.ring->peers()[static_cast<std::size_t>(world_rank)];
  if (!p.known) return "";
  const RankPosition q = to_rank_position(world_rank, p, Clock::now());
  std::string text =
      str("step ", q.step, ", in ", phase_name(q.phase), " for ", format_seconds(q.in_phase_s),
          " when last heard ", format_seconds(q.heard_ago_s), " ago");
  for (const ChannelPosition& c : q.channels) {
    if (c.name.empty() || c.entered == 0) continue;
    text += str(
        "; ", c.name, " ", c.entered_op, " #", c.entered,
        c.completed >= c.entered ? " completed" : str(" entered, #", c.completed, " completed"));
  }
  return text;
}

[[noreturn]] void end_process(int code, const std::string& message, const std::string& outcome) {
  log::error(message);
  write_outcome(code, outcome, state().world_rank);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// A lost rank ends this process: every surviving rank learns it along the ring and says so.
[[noreturn]] void lost(const Loss& loss) {
  MonitorState& s = state();
  Actions announce;
  {
    std::unique_lock<std::mutex> lock(s.ring_mutex, std::try_to_lock);
    if (lock.owns_lock()) announce = s.ring->announce_loss(loss);
  }
  {
    std::unique_lock<std::timed_mutex> lock(s.send_mutex, std::chrono::milliseconds(500));
    if (lock.owns_lock()) {
      for (const Send& out : announce.sends)
        s.connections[static_cast<std::size_t>(out.link)].queue(out.bytes, false);
      drain_outboxes(s.connections, 500);
    }
  }
  std::string how = loss.reason == kClosed ? std::string("its connection closed without a goodbye")
                                           : str("no heartbeat for ", format_seconds(loss.silent_s),
                                                 " (timeout ", format_seconds(s.timeout_s), ")");
  if (loss.reported_by != s.world_rank)
    how = str("reported by ", describe_rank(loss.reported_by), ": ", how);
  const std::string flight = FlightRecorder::dump(DumpReason::kLostRank);
  const std::string flight_note =
      flight.empty() ? std::string()
                     : str(" Flight records: ", FlightRecorder::directory(), "/rank-*.json.");
  const int code = static_cast<int>(kExitComm);
  if (loss.lost_rank == s.world_rank) {
    // This rank was silent (stopped, starved, or cut off) and the others gave up on it.
    end_process(code,
                str("the other ranks lost contact with this rank (", how,
                    "): it was stopped or starved for longer than the peer timeout, or the "
                    "network to it broke. Ending with exit code ",
                    code, " (communicator failure).", flight_note),
                str("the other ranks lost contact with rank ", s.world_rank, " (", how, ")"));
  }
  const std::string last = last_position(loss.lost_rank);
  if (!last.empty()) how += str(". Its last known position: ", last);
  end_process(code,
              str("lost ", describe_rank(loss.lost_rank), ": ", how,
                  ". Its process died, its node failed, or the network to it broke; the job "
                  "cannot continue without it. Ending with exit code ",
                  code,
                  " (communicator failure); resume from the latest checkpoint on the nodes left "
                  "(jobs/train.sbatch requeues itself). Tune with --peer-timeout or "
                  "HPCTRAIN_PEER_TIMEOUT.",
                  flight_note),
              str("lost ", describe_rank(loss.lost_rank), ": ", how));
}

}  // namespace

// Carries out what the ring asked for (sends, dumps, an abort noted, a loss).
void act(const Actions& actions) {
  send(actions);
  if (actions.abort_rank >= 0) note_job_abort(actions.abort_rank, actions.abort_code);
  if (actions.dump_for_hang) FlightRecorder::request_dump(DumpReason::kCollectiveTimeout);
  if (actions.dump_requested) FlightRecorder::request_dump(DumpReason::kRequested);
  // After an error every rank agreed on, each rank ends by itself with the agreed code: a
  // neighbour that closes or falls silent then is ending too, not lost (its goodbye can still be
  // on its way when its connection closes, as at 2 ranks, whose two links join the same pair).
  if (actions.loss && agreed_exit_code() < 0) lost(*actions.loss);
}

namespace {

// Reads what arrived on connection `i`; its messages go to the ring.
void receive(std::size_t i, Clock::time_point now) {
  MonitorState& s = state();
  Connection& c = s.connections[i];
  bool got = false;
  const bool open = c.receive(got);
  const int link = static_cast<int>(i);
  if (got) {
    std::lock_guard<std::mutex> lock(s.ring_mutex);
    s.ring->heard(link, now);
  }
  Message m;
  std::string payload;
  for (;;) {
    const auto next = c.reader().next(m, payload);
    if (next == FrameReader::Next::kNeedMore) break;
    if (next == FrameReader::Next::kBroken) {
      with_ring([&](PeerRing& ring) { return ring.on_closed(link); });
      std::lock_guard<std::timed_mutex> lock(s.send_mutex);
      c.close();
      return;
    }
    with_ring([&](PeerRing& ring) { return ring.on_message(link, m, payload, now); });
  }
  if (!open) {
    with_ring([&](PeerRing& ring) { return ring.on_closed(link); });
    std::lock_guard<std::timed_mutex> lock(s.send_mutex);
    c.close();
  }
}

}  // namespace

void monitor_loop() {
  MonitorState& s = state();
  auto last_loop = Clock::now();
  const auto period = std::chrono::duration<double>(s.period_s);
  // A loop iteration late by this much means this process was stopped (SIGSTOP, a suspended
  // job) or starved: the silence it saw is its own, so the neighbours' clocks restart.
  const auto stall = std::chrono::duration<double>(std::max(3 * s.period_s, s.timeout_s / 2));
  std::vector<pollfd> fds;
  while (s.running.load()) {
    // A move (wake_pending) goes out once the gap since the last send has passed; until then
    // the flag stays set, so further moves do not wake this thread again. Without one, the
    // heartbeat is due a period after the last send.
    Clock::time_point due;
    {
      std::lock_guard<std::mutex> lock(s.ring_mutex);
      due = s.ring->next_send(s.wake_pending.load(std::memory_order_acquire));
    }
    if (Clock::now() >= due) {
      // Cleared before the position is read: a move after this read wakes the loop again.
      s.wake_pending.store(false, std::memory_order_release);
      PositionRecord own = own_position();
      Actions actions;
      {
        std::lock_guard<std::mutex> lock(s.ring_mutex);
        actions = s.ring->on_position(std::move(own), Clock::now());
        due = s.ring->next_send(false);
      }
      act(actions);
    }
    fds.clear();
    fds.push_back(pollfd{s.wake[0], POLLIN, 0});
    {
      std::lock_guard<std::timed_mutex> lock(s.send_mutex);
      for (const Connection& c : s.connections) {
        fds.push_back(
            pollfd{c.fd(), static_cast<short>(c.wants_write() ? (POLLIN | POLLOUT) : POLLIN), 0});
      }
    }
    // Microseconds: the gap between two sends is below a millisecond in small rings.
    const auto until_due = std::chrono::duration_cast<std::chrono::nanoseconds>(due - Clock::now());
    const std::int64_t wait_ns = std::clamp<std::int64_t>(
        until_due.count(), 0, static_cast<std::int64_t>(s.period_s * 0.5e9));
    const timespec wait{static_cast<time_t>(wait_ns / 1000000000),
                        static_cast<long>(wait_ns % 1000000000)};
    ::ppoll(fds.data(), fds.size(), &wait, nullptr);
    if (!s.running.load()) break;
    if (fds[0].revents & POLLIN) {
      char bytes[64];
      while (::read(s.wake[0], bytes, sizeof bytes) > 0) {
      }
    }
    const auto now = Clock::now();
    if (now - last_loop > stall) {
      std::lock_guard<std::mutex> lock(s.ring_mutex);
      s.ring->stalled(now);
    }
    if (now - last_loop > 5 * period) {  // the flight file says so (its position is that late)
      s.stalled_s = std::chrono::duration<double>(now - last_loop).count();
      s.stall_end_ns = now_ns(now);
    }
    last_loop = now;
    for (std::size_t i = 0; i < s.connections.size(); ++i) {
      if (!s.connections[i].open()) continue;
      if (fds[i + 1].revents & POLLOUT) {
        std::lock_guard<std::timed_mutex> lock(s.send_mutex);
        s.connections[i].flush();
      }
      if ((fds[i + 1].revents & ~POLLOUT) != 0) receive(i, now);
    }
    with_ring([&](PeerRing& ring) { return ring.check_silence(now); });
  }
}

void close_links() {
  MonitorState& s = state();
  // The wake pipe stays open for the process's life: a thread that moved may still be writing
  // its byte, and a closed descriptor's number may already name another file.
  set_position_listener(nullptr);
  std::lock_guard<std::timed_mutex> lock(s.send_mutex);
  s.connections.clear();
}

}  // namespace hpctrain::runtime::peer
