#pragma once
// The peer monitor's process-wide state and the pieces its thread (peer_monitor_loop.cpp) and its
// public functions (peer_monitor.cpp) share. Private to src/runtime.

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/peer_ring.hpp"
#include "peer_transport.hpp"

namespace hpctrain::runtime::peer {

struct MonitorState {
  // Lock order: ring_mutex, then send_mutex; neither is held while waiting for the network.
  std::mutex ring_mutex;        // the ring's policy state: the monitor thread and the queries
  std::timed_mutex send_mutex;  // the connections' outboxes: the monitor thread, stop(), aborts
  std::unique_ptr<PeerRing> ring;
  std::vector<Connection> connections;
  std::thread thread;
  std::atomic<bool> running{false};
  std::atomic<bool> wake_pending{false};
  int wake[2] = {-1, -1};
  double timeout_s = 0;
  double period_s = 1;
  int world_rank = 0;
  int world_size = 1;
  std::uint64_t token = 0;
  std::vector<Endpoint> endpoints;
  std::string off_reason;
  Clock::time_point started;
  std::atomic<bool> dumped_sent{false};
  std::atomic<std::uint32_t> dump_requests{0};
  // The last time this process was stopped or starved (the monitor loop ran late): how long, and
  // when it ended (steady-clock ns).
  std::atomic<double> stalled_s{0};
  std::atomic<std::int64_t> stall_end_ns{0};
};

/// The one state of this process. Local.
MonitorState& monitor_state();
/// Steady-clock nanoseconds. Local.
std::int64_t now_ns(Clock::time_point t = Clock::now());
/// Wakes the monitor thread once (position.hpp's listener: this rank moved). Local, lock-free.
void wake_monitor();
/// Carries out what the ring asked for: sends, flight-file dumps, a noted abort, a loss (which
/// ends the process). Local; call without the ring lock.
void act(const Actions& actions);
/// Runs `f` on the ring under its lock, then carries out the actions it returned. Local.
template <class F>
void with_ring(F&& f) {
  MonitorState& s = monitor_state();
  Actions actions;
  {
    std::lock_guard<std::mutex> lock(s.ring_mutex);
    actions = f(*s.ring);
  }
  act(actions);
}
/// What the ring knows of `world_rank`, as the hang report takes it. Local.
RankPosition to_rank_position(int world_rank, const PeerState& p, Clock::time_point now);
/// The monitor thread's body. Local.
void monitor_loop();
/// Closes every connection and the wake pipe. Local.
void close_links();

}  // namespace hpctrain::runtime::peer
