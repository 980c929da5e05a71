#include "step_observers.hpp"

namespace hpctrain::train {

StepObservers::StepObservers(const TrainConfig& cfg, std::int64_t comm_slices_per_step, int tp_size,
                             comm::ControlPlane& world, int world_rank)
    : world_(world),
      trace_(cfg.logging.trace, cfg.logging.trace_max_mb,
             trace_slices_per_step(cfg.optim.grad_accumulation, comm_slices_per_step,
                                   tp_size > 1 ? 64 * cfg.optim.grad_accumulation : 0),
             cfg.run.dir, world),
      profile_(cfg.logging.profile, cfg.logging.profile_warmup, cfg.run.dir, world_rank) {}

void StepObservers::before_step(std::int64_t step) {
  trace_.before_step(step);
  profile_.before_step(step);
}

void StepObservers::after_step(std::int64_t step, const std::function<void()>& settle) {
  trace_.after_step(step, world_, settle);
  profile_.after_step(step);
}

void StepObservers::finish() {
  trace_.finish(world_);
  profile_.finish();
}

}  // namespace hpctrain::train
