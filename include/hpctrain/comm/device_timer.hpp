#pragma once
// Timing of work queued on the compute device without stopping the host (docs/ARCHITECTURE.md,
// "One training step"). On CUDA, marks are events on the default (compute) stream and their
// times are read when resolve() is called (the trainer does at logging intervals), so the host
// keeps queueing work ahead of the GPU; a device-wide synchronize after every phase would stop
// it. On CPU, work is synchronous and a mark is the host clock.

#include <array>
#include <chrono>
#include <memory>
#include <vector>

namespace hpctrain::comm {

class DeviceTimer {
 public:
  /// Spans are added to one of kSlots accumulators (the caller names them).
  static constexpr int kSlots = 4;
  using Seconds = std::array<double, kSlots>;

  /// `cuda`: the work runs on CUDA device `cuda_index` (-1: the current device); events are
  /// created and recorded with that device set (on the calling thread, which may not have set
  /// it). Without CUDA events in this build (no CUDA toolkit at configure time), a CUDA timer
  /// synchronizes the device at each mark: the old behaviour, correct and slower. Local.
  explicit DeviceTimer(bool cuda, int cuda_index = -1);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  /// Whether marks are device events (the host does not wait at a mark). Local.
  bool uses_events() const;
  /// A point in the compute stream's work: everything queued before it. Local.
  int mark();
  /// Adds the time between two marks to `slot`, when it is known (at once on CPU). Local.
  void add(int slot, int from, int to);
  /// Seconds added per slot since the last resolve; on CUDA this waits for the device to reach
  /// the last mark (once per call, not per phase). Local.
  Seconds resolve();

 private:
  struct Events;
  using Clock = std::chrono::steady_clock;
  bool cuda_;
  int cuda_index_;
  std::vector<Clock::time_point> host_marks_;
  std::unique_ptr<Events> events_;
  Seconds done_{};
};

}  // namespace hpctrain::comm
