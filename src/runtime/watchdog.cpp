#include "hpctrain/runtime/watchdog.hpp"

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// A few slots suffice: at most the main thread, a communication thread and a prefetch thread
// are in collectives at once. Slots are claimed under a mutex; the cost (~100 ns) is negligible
// against any collective.
constexpr int kSlots = 16;

struct Slot {
  bool busy = false;
  const char* operation = nullptr;
  const char* group = nullptr;
  std::size_t bytes = 0;
  Clock::time_point since;
  Channel* channel = nullptr;
  std::uint64_t seq = 0;
  std::string detail;      // point-to-point: the peers
  std::vector<int> peers;  // their world ranks
};

struct State {
  std::mutex mutex;
  std::condition_variable wake;
  std::array<Slot, kSlots> slots;
  std::thread monitor;
  bool running = false;
  double timeout_s = 0;
};

State& state() {
  static State s;
  return s;
}

// How long the rank that reports a hang waits for the other ranks' flight files before it ends
// the job, and how long a rank that leaves the report to another waits for that rank to end it.
constexpr double kDumpWaitSeconds = 5;
constexpr double kReporterGraceSeconds = 30;
// A rank heard from within this is alive as far as the heartbeats know (they come every second).
constexpr double kFreshSeconds = 3;
// How long a point-to-point wait whose peers are alive defers its claim to report the hang: the
// neighbours of the stuck rank time out within the watchdog's period of it and claim first.
constexpr double kDeferSeconds = 3;

// Whether any of `peers` (world ranks) was not heard from recently (or never). Local.
bool any_silent(const std::vector<int>& peers, const std::vector<RankPosition>& positions) {
  for (int peer : peers) {
    bool fresh = false;
    for (const RankPosition& p : positions) {
      if (p.world_rank == peer) fresh = p.known && p.heard_ago_s <= kFreshSeconds;
    }
    if (!fresh) return true;
  }
  return false;
}

// Reports a collective past its deadline and ends the job with kExitHang. Runs on the watchdog
// thread, without the lock.
[[noreturn]] void report_hang(const Slot& slot, double waited, double timeout_s) {
  const Runtime* rt = Runtime::current();
  const int world_rank = rt ? rt->world_rank() : 0;
  const std::string host = rt ? node_name(rt->host()) : std::string();
  // A pipeline stage waiting on a neighbour that itself waits: the rank waiting on the silent
  // one is nearer the cause, and names it; let it claim first.
  if (!slot.peers.empty() && PeerMonitor::running() &&
      !any_silent(slot.peers, PeerMonitor::positions())) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kDeferSeconds));
  }
  // One message for the job: the ranks whose collectives time out together agree over the
  // heartbeat ring which of them reports; the others only write their flight files.
  const int reporter = PeerMonitor::claim_hang_report();
  if (reporter != world_rank) {
    FlightRecorder::request_dump(DumpReason::kCollectiveTimeout);
    std::this_thread::sleep_for(std::chrono::duration<double>(kReporterGraceSeconds));
    log::error(str("collective ", slot.operation, " on the ", slot.group,
                   " group has not completed after ",
                   format_seconds(waited + kReporterGraceSeconds), "; rank ", reporter,
                   " reported the hang but the job did not end: aborting"));
    write_outcome(
        kExitHang,
        str("collective ", slot.operation, " on the ", slot.group, " group",
            slot.detail.empty() ? std::string() : " (" + slot.detail + ")", " has not completed"),
        world_rank);
    abort_job(kExitHang);
  }
  const std::string detail = slot.detail.empty() ? std::string() : ", " + slot.detail;
  std::string text =
      str("collective ", slot.operation, " on the ", slot.group, " group (",
          format_bytes(static_cast<double>(slot.bytes)), detail, ") has not completed after ",
          format_seconds(waited), " (timeout ", format_seconds(timeout_s), ")");
  std::string summary = text;
  if ((slot.channel != nullptr || !slot.peers.empty()) && PeerMonitor::running()) {
    // A collective, or a point-to-point batch (channel 0: not numbered, it waits for its peers);
    // a member that waits in turn is followed to the rank that holds them all up.
    WaitingCollective w;
    w.world_rank = world_rank;
    w.host = host;
    w.group = slot.group;
    w.channel = slot.channel ? slot.channel->name() : std::string(slot.group);
    w.channel_id = slot.channel ? slot.channel->id() : 0;
    w.members = slot.channel ? slot.channel->members() : slot.peers;
    w.seq = slot.seq;
    w.op = slot.operation;
    w.waited_s = waited;
    w.step = position::step();
    const HangAttribution attribution = attribute_hang(w, PeerMonitor::positions());
    text += ". " + attribution.text;
    summary = attribution.text;
  } else if (slot.channel != nullptr && PeerMonitor::timeout() <= 0) {
    const std::string why = PeerMonitor::off_reason();
    text += str(". Which rank it waits for is unknown: the peer monitor is off",
                why.empty() ? std::string() : " (" + why + ")");
  }
  const std::string flight_dir = FlightRecorder::directory();
  if (!flight_dir.empty()) {
    text += str(". Flight records of every rank that could write one: ", flight_dir,
                "/rank-*.json (hpctrain trace flight on the run directory merges them)");
  }
  log::error(text +
             ". Another rank has probably failed, been stopped, or is running a different "
             "command; check the other ranks' messages above. Raise the limit with "
             "--collective-timeout or HPCTRAIN_COLLECTIVE_TIMEOUT if the wait is legitimate. "
             "Aborting the job.");
  if (!flight_dir.empty() && !FlightRecorder::dump(DumpReason::kCollectiveTimeout).empty()) {
    PeerMonitor::wait_for_dumps(kDumpWaitSeconds);
  }
  write_outcome(kExitHang, clip(summary, 2000), world_rank);
  abort_job(kExitHang);
}

void monitor_loop() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  const auto period = std::chrono::duration<double>(std::min(1.0, std::max(0.05, s.timeout_s / 4)));
  while (s.running) {
    s.wake.wait_for(lock, period);
    if (!s.running) break;
    const auto now = Clock::now();
    for (const Slot& slot : s.slots) {
      if (!slot.busy) continue;
      double waited = std::chrono::duration<double>(now - slot.since).count();
      if (waited < s.timeout_s) continue;
      const Slot expired = slot;
      const double timeout_s = s.timeout_s;
      lock.unlock();
      report_hang(expired, waited, timeout_s);
    }
  }
}

}  // namespace

void Watchdog::start(double timeout_s) {
  stop();
  State& s = state();
  if (timeout_s <= 0) return;
  std::lock_guard<std::mutex> lock(s.mutex);
  s.timeout_s = timeout_s;
  s.running = true;
  s.monitor = std::thread(monitor_loop);
}

void Watchdog::stop() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.running) return;
    s.running = false;
  }
  s.wake.notify_all();
  if (s.monitor.joinable()) s.monitor.join();
  s.timeout_s = 0;
}

double Watchdog::timeout() {
  return state().timeout_s;
}

Watchdog::Scope::Scope(const char* operation, const char* group, std::size_t bytes)
    : Scope(operation, group, bytes, nullptr, 0) {}

Watchdog::Scope::Scope(const char* operation, const char* group, std::size_t bytes,
                       Channel* channel, std::uint64_t seq, std::string detail,
                       std::vector<int> peers) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.running) return;
  for (int i = 0; i < kSlots; ++i) {
    if (!s.slots[i].busy) {
      s.slots[i] = Slot{true, operation,         group,           bytes, Clock::now(), channel,
                        seq,  std::move(detail), std::move(peers)};
      slot_ = i;
      return;
    }
  }
}

Watchdog::Scope::~Scope() {
  if (slot_ < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.slots[slot_].busy = false;
}

}  // namespace hpctrain::runtime
