#include "hpctrain/train/step_clock.hpp"

#include <algorithm>

namespace hpctrain::train {

double StepClock::end_step(PhaseSeconds& phases) {
  step_end_ = now_();
  const double step_seconds = seconds(step_start_, step_end_) + carried_;
  phases.train_wall += step_seconds;
  excluded_ = 0;
  return step_seconds;
}

void StepClock::end_iteration() {
  carried_ = std::max(0.0, seconds(step_end_, now_()) - excluded_);
  excluded_ = 0;
}

}  // namespace hpctrain::train
