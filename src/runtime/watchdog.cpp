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
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
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
  std::string detail;  // point-to-point: the peers
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
      const std::string detail = slot.detail.empty() ? std::string() : ", " + slot.detail;
      log::error(str("collective ", slot.operation, " on the ", slot.group, " group (",
                     format_bytes(static_cast<double>(slot.bytes)), detail,
                     ") has not completed after ", format_seconds(waited), " (timeout ",
                     format_seconds(s.timeout_s),
                     "). Another rank has probably failed, been killed, or is running a "
                     "different command; check the other ranks' messages above. Raise the limit "
                     "with --collective-timeout or HPCTRAIN_COLLECTIVE_TIMEOUT if the wait is "
                     "legitimate. Aborting the job."));
      // Built before the lock goes: the slot may be released and reused after.
      const std::string outcome =
          str("collective ", slot.operation, " on the ", slot.group, " group",
              slot.detail.empty() ? std::string() : " (" + slot.detail + ")",
              " has not completed after ", format_seconds(waited));
      lock.unlock();
      write_outcome(kExitHang, outcome, -1);
      abort_job(kExitHang);
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
    : Scope(operation, group, bytes, std::string()) {}

Watchdog::Scope::Scope(const char* operation, const char* group, std::size_t bytes,
                       std::string detail) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.running) return;
  for (int i = 0; i < kSlots; ++i) {
    if (!s.slots[i].busy) {
      s.slots[i] = Slot{true, operation, group, bytes, Clock::now(), std::move(detail)};
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
