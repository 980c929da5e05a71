#include "debug_hooks.hpp"

#include <csignal>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

int DebugHooks::stop_signal(std::int64_t step, int received) const {
  if (debug_.stop_step >= 0 && step == debug_.stop_step && stop_rank_matches()) return SIGUSR1;
  return received;
}

void DebugHooks::at_evaluation(std::int64_t step) const {
  if (debug_.stop_eval_step == step && stop_rank_matches()) runtime::request_stop(SIGUSR1);
}

void DebugHooks::fail_at(std::int64_t step) const {
  if (debug_.fail_step == step && debug_.fail_rank == world_rank_) {
    throw Error(str("debug.fail_step: rank ", debug_.fail_rank, " fails alone ",
                    step == 0 ? std::string("before the step loop") : str("at step ", step)),
                1);
  }
}

void DebugHooks::desync(std::int64_t step, comm::ControlPlane& world) const {
  if (debug_.desync_step == step && debug_.desync_rank == world_rank_) world.barrier();
}

data::InputStaging DebugHooks::input_staging(bool cuda) const {
  if (cuda) return data::InputStaging::kPinned;
  return debug_.stage_inputs ? data::InputStaging::kCopy : data::InputStaging::kNone;
}

void DebugHooks::hold_memory() {
  memory_.assign(static_cast<std::size_t>(debug_.extra_memory_mb) << 20, 1);
}

}  // namespace hpctrain::train
