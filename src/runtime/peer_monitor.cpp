// The peer monitor's public functions (peer_monitor.hpp): start over MPI, stop, and the queries
// of the watchdog and the flight recorder. The ring's rules are in peer_ring.cpp, its sockets in
// peer_transport.cpp, its thread in peer_monitor_loop.cpp.

#include "hpctrain/runtime/peer_monitor.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "operation_tracker.hpp"
#include "peer_monitor_state.hpp"
#include "position_listener.hpp"

namespace hpctrain::runtime {

using peer::Clock;

void PeerMonitor::start(const Runtime& runtime, double timeout_s) {
  stop();
  peer::MonitorState& s = peer::monitor_state();
  s.off_reason.clear();
  s.timeout_s = 0;
  if (timeout_s <= 0 || runtime.world_size() < 2) return;
  s.world_rank = runtime.world_rank();
  s.world_size = runtime.world_size();
  s.period_s = std::min(1.0, timeout_s / 4);

  std::string why;
  std::uint16_t port = 0;
  const int listen_fd = peer::listen_any(port, why);
  const peer::Endpoint mine = peer::local_endpoint(port, runtime.host(), node_name(runtime.host()));
  std::uint64_t token = 0;
  if (s.world_rank == 0) {
    std::random_device device;
    token = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
            static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  }
  HPCTRAIN_MPI_CHECK(MPI_Bcast(&token, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  s.token = token;
  s.endpoints.assign(static_cast<std::size_t>(s.world_size), peer::Endpoint{});
  HPCTRAIN_MPI_CHECK(MPI_Allgather(&mine, sizeof(peer::Endpoint), MPI_BYTE, s.endpoints.data(),
                                   sizeof(peer::Endpoint), MPI_BYTE, MPI_COMM_WORLD));
  int listening = why.empty() ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &listening, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));

  const int successor = (s.world_rank + 1) % s.world_size;
  const int predecessor = (s.world_rank + s.world_size - 1) % s.world_size;
  int out_fd = -1;
  int in_fd = -1;
  if (listening) {
    // Accepting on a thread while connecting: every rank connects to its successor and waits for
    // its answer, which comes from that rank's acceptor.
    std::string accept_why;
    std::thread acceptor([&] {
      in_fd = peer::accept_from(listen_fd, s.world_rank, predecessor, token, 20, accept_why);
    });
    out_fd = peer::connect_to(s.endpoints, s.world_rank, successor, token, why);
    acceptor.join();
    if (why.empty() && in_fd < 0) why = accept_why;
    if (out_fd < 0 && why.empty()) why = str("cannot reach rank ", successor);
  }
  if (listen_fd >= 0) ::close(listen_fd);
  if (s.wake[0] < 0 && ::pipe2(s.wake, O_CLOEXEC | O_NONBLOCK) != 0 && why.empty())
    why = str("pipe2(): ", std::strerror(errno));
  int ok = (out_fd >= 0 && in_fd >= 0 && s.wake[0] >= 0) ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!ok) {
    if (out_fd >= 0) ::close(out_fd);
    if (in_fd >= 0) ::close(in_fd);
    if (!why.empty()) log::rank_warn(str("peer monitor: ", why));
    s.off_reason = why.empty() ? "another rank could not connect (see its warning)" : why;
    log::warn(
        "peer monitor off: the ranks could not connect to each other over TCP (see the rank "
        "warnings). A dead peer process or node is then noticed only by the collective "
        "timeout (--collective-timeout, exit 7)");
    return;
  }
  s.connections.clear();
  s.connections.emplace_back(out_fd, token);
  s.connections.emplace_back(in_fd, token);
  peer::PeerRing::Options options;
  options.world_rank = s.world_rank;
  options.world_size = s.world_size;
  options.token = token;
  options.timeout_s = timeout_s;
  options.period_s = s.period_s;
  // A move goes out at most every 0.2 ms per rank of the ring: each link then carries at most
  // about 120 kB/s of positions of 24 + 16 x channels bytes, whatever the world size.
  options.min_gap_s = std::min(s.period_s, 0.0002 * s.world_size);
  {
    std::lock_guard<std::mutex> lock(s.ring_mutex);
    s.ring = std::make_unique<peer::PeerRing>(options, std::vector<int>{successor, predecessor},
                                              Clock::now());
  }
  s.dumped_sent = false;
  s.started = Clock::now();
  s.timeout_s = timeout_s;
  s.running = true;
  s.thread = std::thread(peer::monitor_loop);
  set_position_listener(peer::wake_monitor);
}

void PeerMonitor::stop() {
  peer::MonitorState& s = peer::monitor_state();
  if (!s.running.exchange(false)) return;
  peer::Actions bye;
  {
    std::lock_guard<std::mutex> lock(s.ring_mutex);
    bye = s.ring->broadcast(peer::make_message(peer::kBye, s.world_rank, s.token));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - s.started).count();
  const std::uint64_t sent = bytes_sent();
  {
    std::lock_guard<std::timed_mutex> lock(s.send_mutex);
    for (const peer::Send& out : bye.sends)
      s.connections[static_cast<std::size_t>(out.link)].queue(out.bytes, false);
    peer::drain_outboxes(s.connections, 1000);
  }
  log::debug(str("peer monitor: ", sent, " bytes sent to the ring neighbours in ",
                 format_seconds(seconds), " (",
                 static_cast<long long>(seconds > 0 ? sent / seconds : 0),
                 " bytes/s from this rank, carrying the positions of ", s.world_size, " ranks)"));
  peer::wake_monitor();
  if (s.thread.joinable()) s.thread.join();
  peer::close_links();
  s.timeout_s = 0;
}

void PeerMonitor::announce_abort(int exit_code) {
  peer::MonitorState& s = peer::monitor_state();
  if (!s.running.load()) return;
  peer::Message m = peer::make_message(peer::kAbort, s.world_rank, s.token);
  m.subject = static_cast<std::uint32_t>(s.world_rank);
  m.detail = static_cast<std::uint32_t>(exit_code);
  // Wait a moment for a send of the monitor thread, never for long: abort_job must not hang.
  std::unique_lock<std::timed_mutex> lock(s.send_mutex, std::chrono::milliseconds(100));
  if (!lock.owns_lock()) return;
  for (peer::Connection& c : s.connections) c.queue(peer::encode(m), false);
  peer::drain_outboxes(s.connections, 200);
}

bool PeerMonitor::running() {
  return peer::monitor_state().running.load();
}

double PeerMonitor::timeout() {
  return peer::monitor_state().timeout_s;
}

std::string PeerMonitor::off_reason() {
  return peer::monitor_state().off_reason;
}

std::vector<RankPosition> PeerMonitor::positions() {
  peer::MonitorState& s = peer::monitor_state();
  const auto now = Clock::now();
  const Runtime* rt = Runtime::current();
  const int self = rt ? rt->world_rank() : 0;
  // This rank's own position, as of now.
  RankPosition mine;
  mine.world_rank = self;
  mine.known = true;
  mine.host = rt ? node_name(rt->host()) : std::string();
  mine.step = position::step();
  mine.phase = position::phase();
  mine.in_phase_s = (peer::now_ns(now) - position::phase_started_ns()) * 1e-9;
  for (Channel* c : channels()) {
    const ChannelState st = c->snapshot();
    mine.channels.push_back(
        ChannelPosition{st.id, st.name, st.entered, st.entered_op, st.completed, st.completed_op});
  }
  mine.operation = current_operation();
  if (!s.running.load()) return {mine};
  std::vector<RankPosition> out;
  std::lock_guard<std::mutex> lock(s.ring_mutex);
  const auto& peers = s.ring->peers();
  for (int r = 0; r < static_cast<int>(peers.size()); ++r) {
    out.push_back(r == self ? mine
                            : peer::to_rank_position(r, peers[static_cast<std::size_t>(r)], now));
  }
  return out;
}

int PeerMonitor::claim_hang_report() {
  peer::MonitorState& s = peer::monitor_state();
  const Runtime* rt = Runtime::current();
  const int self = rt ? rt->world_rank() : 0;
  if (!s.running.load()) return self;
  int other = -1;
  peer::with_ring([&](peer::PeerRing& ring) {
    other = ring.hang_claim();
    // Another rank reports; its claim asked for this rank's file.
    return other >= 0 ? peer::Actions{}
                      : ring.broadcast(peer::make_message(peer::kHang, s.world_rank, s.token));
  });
  if (other >= 0) return other;
  // Claims made at once cross on the ring within milliseconds; the lowest claimant reports.
  const double window = std::max(0.5, 0.002 * s.world_size);
  std::this_thread::sleep_for(std::chrono::duration<double>(window));
  std::lock_guard<std::mutex> lock(s.ring_mutex);
  const int seen = s.ring->hang_claim();
  return seen >= 0 && seen < self ? seen : self;
}

void PeerMonitor::wait_for_dumps(double seconds) {
  peer::MonitorState& s = peer::monitor_state();
  if (!s.running.load()) return;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(s.ring_mutex);
      if (s.ring->dumps_seen() >= s.ring->fresh_peers(Clock::now(), 3.0)) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void PeerMonitor::after_dump(DumpReason reason) {
  peer::MonitorState& s = peer::monitor_state();
  if (!s.running.load()) return;
  peer::Message m;
  if (reason == DumpReason::kCollectiveTimeout) {
    if (s.dumped_sent.exchange(true)) return;
    m = peer::make_message(peer::kDumped, s.world_rank, s.token);
  } else if (reason == DumpReason::kSignal) {
    m = peer::make_message(peer::kDumpRequest, s.world_rank, s.token);
    m.detail = ++s.dump_requests;
  } else {
    return;
  }
  peer::with_ring([&](peer::PeerRing& ring) { return ring.broadcast(m); });
}

double PeerMonitor::last_stall(double& ended_ago_s) {
  peer::MonitorState& s = peer::monitor_state();
  const std::int64_t end = s.stall_end_ns.load();
  if (end == 0) return 0;
  ended_ago_s = (peer::now_ns() - end) * 1e-9;
  return s.stalled_s.load();
}

std::uint64_t PeerMonitor::bytes_sent() {
  peer::MonitorState& s = peer::monitor_state();
  std::unique_lock<std::timed_mutex> lock(s.send_mutex, std::chrono::milliseconds(100));
  std::uint64_t total = 0;
  if (lock.owns_lock()) {
    for (const peer::Connection& c : s.connections) total += c.bytes_sent();
  }
  return total;
}

double PeerMonitor::seconds_running() {
  peer::MonitorState& s = peer::monitor_state();
  if (!s.running.load()) return 0;
  return std::chrono::duration<double>(Clock::now() - s.started).count();
}

}  // namespace hpctrain::runtime
