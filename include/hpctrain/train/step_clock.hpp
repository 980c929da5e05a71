#pragma once
// The training loop's clock: how long each step took as the ledger and the train records count
// it. A step runs from its start (data wait included) to the end of its update, plus the loop's
// own time after the previous step (logging, the stop agreement), which is carried into it;
// evaluations and checkpoint saves between steps are excluded (they have phases of their own).
// So the steps' seconds add up to the loop's time less evaluations and saves.

#include <chrono>
#include <functional>

#include "hpctrain/train/ledger.hpp"

namespace hpctrain::train {

class StepClock {
 public:
  using Clock = std::chrono::steady_clock;
  /// Where the time comes from (tests pass a clock of their own). Local.
  using Now = std::function<Clock::time_point()>;

  explicit StepClock(Now now = [] { return Clock::now(); }) : now_(std::move(now)) {}

  /// A step starts (before its data is fetched). Local.
  void begin_step() { step_start_ = now_(); }
  /// When the current step started. Local.
  Clock::time_point step_start() const { return step_start_; }
  /// The step's update is done: returns its seconds (since begin_step(), plus the loop time
  /// carried from the previous iteration) and adds them to `phases.train_wall`. Local.
  double end_step(PhaseSeconds& phases);
  /// Runs `work` (an evaluation, a save) with its time kept out of the training time. Local.
  template <class Work>
  void exclude(Work&& work) {
    const Clock::time_point start = now_();
    work();
    excluded_ += seconds(start, now_());
  }
  /// Keeps `seconds` (measured by the caller) out of the training time. Local.
  void exclude_seconds(double seconds) { excluded_ += seconds; }
  /// The iteration after the step is over: its time since end_step(), less what was excluded,
  /// is carried into the next step. Local.
  void end_iteration();
  /// The time carried into the next step. Local.
  double carried() const { return carried_; }

 private:
  static double seconds(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }
  Now now_;
  Clock::time_point step_start_{};
  Clock::time_point step_end_{};
  double carried_ = 0;
  double excluded_ = 0;
};

}  // namespace hpctrain::train
