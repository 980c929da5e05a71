#pragma once
// How a training run ends, decided in one place: the agreed stop request of a step boundary (a
// signal on any rank, the wall-time deadline) becomes a stop to be resumed (a save, exit 75:
// requeue me), early stopping a completed run (exit 0), and a spent step budget completion.

#include <cstdint>
#include <string>

#include "hpctrain/comm/stop_agreement.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {

class StopPolicy {
 public:
  /// `deadline_source` names the deadline in the reason ("run.time_limit", "the Slurm job's time
  /// limit"). With `flight_dump` (logging.flight_dump) a stop for a signal writes the flight
  /// recorder's files (runtime/flight_recorder.hpp). Local.
  explicit StopPolicy(std::string deadline_source, bool flight_dump = false);

  /// Applies what every rank agreed at a step boundary: `agreed_signal` (the first signal agreed
  /// so far, StopAgreement::signal(); 0: none) or `agreed.deadline` stops the run to be resumed.
  /// A signal wins over the deadline, and either over early stopping. Returns whether this
  /// request stops the run to be resumed. Local (the same on every rank: the inputs are agreed).
  bool apply(const comm::StopRequest& agreed, int agreed_signal);
  /// Early stopping ends the run (as completed, exit 0) for `reason`. Local.
  void early_stop(std::string reason);

  /// The run stops after this step. Local.
  bool stopping() const { return stopping_; }
  /// The run stops to be resumed: the step must be saved (checkpoint::SaveReason::kStop). Local.
  bool must_save() const { return outcome_.exit_code == kExitRequeue; }
  /// No step follows `step` of `total_steps`: the budget is spent or the run stops. Local.
  bool last_step(std::int64_t step, std::int64_t total_steps) const {
    return stopping_ || step == total_steps;
  }
  /// How the run ended after `steps` steps ("completed" when nothing stopped it). Local.
  TrainOutcome outcome(std::int64_t steps) const;

 private:
  std::string deadline_source_;
  bool flight_dump_ = false;
  bool stopping_ = false;
  TrainOutcome outcome_;
};

}  // namespace hpctrain::train
