#pragma once
// The timeline recorder behind logging.trace: slices (name, start, end) on lanes ("main",
// "comm dp", "checkpoint writer", ...) of this process, recorded only while a trace window is
// open. When it is closed, a recording point costs one relaxed atomic load. Every lane is written
// by one thread at a time, and slices of one lane nest strictly (scopes, or the serialised
// collectives of one communicator). The train layer's TraceSession opens the window, aligns the
// clocks of the ranks and writes trace.json.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::runtime::trace {

using Clock = std::chrono::steady_clock;

/// One recorded slice. `name` is a string literal; `arg` a number it carries (bytes, a step).
struct Slice {
  int lane = 0;
  const char* name = "";
  std::int64_t start_ns = 0;  ///< steady_clock nanoseconds
  std::int64_t end_ns = 0;
  std::int64_t arg = -1;
};

namespace detail {
extern std::atomic<bool> g_on;
}

/// Whether a trace window is open. Local.
inline bool on() {
  return detail::g_on.load(std::memory_order_relaxed);
}

/// The lane called `name`, created at its first use (lane 0 is "main"). Local; thread-safe.
int lane(const std::string& name);
/// Records a slice [start, end) on `lane` (nothing when no window is open). Local; thread-safe.
void record(int lane, const char* name, Clock::time_point start, Clock::time_point end,
            std::int64_t arg = -1);

/// Records [construction, destruction) as one slice when a window was open at construction.
class Scope {
 public:
  Scope(int lane, const char* name, std::int64_t arg = -1)
      : lane_(lane), name_(name), arg_(arg), active_(on()) {
    if (active_) start_ = Clock::now();
  }
  ~Scope() {
    if (active_) record(lane_, name_, start_, Clock::now(), arg_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  int lane_;
  const char* name_;
  std::int64_t arg_;
  bool active_;
  Clock::time_point start_;
};

/// Opens the window (drops slices of an earlier one). Local.
void open();
/// Closes it and returns what it recorded. Local.
std::vector<Slice> close();
/// Names of the lanes, by lane number. Local.
std::vector<std::string> lane_names();
/// Nanoseconds of a steady_clock time point, as Slice stores them. Local.
std::int64_t to_ns(Clock::time_point t);

}  // namespace hpctrain::runtime::trace
