#pragma once
// The timeline recorder behind logging.trace: slices (name, start, end) on lanes ("main",
// "comm dp", "checkpoint writer", ...) of this process, recorded only while a trace window is
// open. When it is closed, a recording point costs one relaxed atomic load. Every lane is written
// by one thread at a time, and slices of one lane nest strictly (scopes, or the serialised
// collectives of one communicator). The train layer's TraceSession opens the window, aligns the
// clocks of the ranks and writes trace.json. Slices whose times are known only later (a GPU
// collective's completion, from CUDA events of its stream) come from deferred sources, resolved
// when the window closes. Configuring with -DHPCTRAIN_TRACE_HOOKS=OFF compiles every recording
// point out (on() is constant false): only for measuring what the closed points cost.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/build_config.hpp"

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
#if HPCTRAIN_TRACE_HOOKS
  return detail::g_on.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

/// The lane called `name`, created at its first use (lane 0 is "main"). Local; thread-safe.
int lane(const std::string& name);
/// Records a slice [start, end) on `lane` (nothing when no window is open). Local; thread-safe.
void record(int lane, const char* name, Clock::time_point start, Clock::time_point end,
            std::int64_t arg = -1);

/// Records [construction, destruction) as one slice when a window was open at construction.
class Scope {
 public:
  /// `enabled` false records nothing (a collective of a group of one, say).
  Scope(int lane, const char* name, std::int64_t arg = -1, bool enabled = true)
      : lane_(lane), name_(name), arg_(arg), active_(enabled && on()) {
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

/// Slices recorded while the window was open whose times become known only later: close() asks
/// each registered source for them (it may block until the device work they time completed).
class DeferredSource {
 public:
  virtual ~DeferredSource() = default;
  /// Appends the window's slices, with times on this process's steady clock, and forgets them.
  /// Must not throw (a source that cannot resolve says why and appends nothing). Local.
  virtual void resolve(std::vector<Slice>& out) = 0;
  /// Forgets what it holds without resolving it (a new window opens). Local.
  virtual void discard() = 0;
};
/// Registers `source` until remove_source; it must outlive that. Local; thread-safe.
void add_source(DeferredSource* source);
/// Unregisters `source`. Local; thread-safe.
void remove_source(DeferredSource* source);

/// One collective timed by events on a device stream: its host launch, and how long before a
/// reference event (recorded once the stream was idle) its start and end events fired.
struct DeviceTiming {
  const char* name = "";
  std::int64_t bytes = -1;
  std::int64_t launch_ns = 0;  ///< steady_clock nanoseconds of the host call
  double start_before_ms = 0;  ///< the stream reached it: elapsed time to the reference
  double end_before_ms = 0;    ///< it completed: elapsed time to the reference
};
/// The slices on `lane` of `ops`, given in stream order, with the reference event at
/// `reference_ns` on the steady clock: each runs from its launch, or from when the stream reached
/// it if later (and never before the previous one ended: one stream runs them one by one, so they
/// nest), to its completion. Local.
std::vector<Slice> place_device_timings(int lane, const std::vector<DeviceTiming>& ops,
                                        double reference_ns);

/// Opens the window (drops slices of an earlier one). Local.
void open();
/// Closes it and returns what it recorded, the deferred sources' slices included. Local.
std::vector<Slice> close();
/// Names of the lanes, by lane number. Local.
std::vector<std::string> lane_names();
/// Nanoseconds of a steady_clock time point, as Slice stores them. Local.
std::int64_t to_ns(Clock::time_point t);

}  // namespace hpctrain::runtime::trace
