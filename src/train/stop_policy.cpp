#include "hpctrain/train/stop_policy.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

StopPolicy::StopPolicy(std::string deadline_source, bool flight_dump)
    : deadline_source_(std::move(deadline_source)), flight_dump_(flight_dump) {
  outcome_.reason = "completed";
}

bool StopPolicy::apply(const comm::StopRequest& agreed, int agreed_signal) {
  if (agreed_signal != 0) {
    outcome_.reason =
        str(runtime::signal_name(agreed_signal), " received: saved, requeue to resume");
    if (flight_dump_ && !stopping_) runtime::FlightRecorder::dump(runtime::DumpReason::kStopSignal);
  } else if (agreed.deadline) {
    outcome_.reason = str("time limit (", deadline_source_, "): saved, requeue to resume");
  } else {
    return false;
  }
  outcome_.exit_code = kExitRequeue;
  stopping_ = true;
  return true;
}

void StopPolicy::early_stop(std::string reason) {
  outcome_.reason = std::move(reason);
  stopping_ = true;
}

TrainOutcome StopPolicy::outcome(std::int64_t steps) const {
  TrainOutcome o = outcome_;
  o.steps = steps;
  return o;
}

}  // namespace hpctrain::train
