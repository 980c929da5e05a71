#include "step_log.hpp"

#include <algorithm>

#include "data_state.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/resource_monitor.hpp"

namespace hpctrain::train {

void StepLog::after_step(std::int64_t step, const StepResult& r, double step_seconds,
                         const data::SamplerState& position, PhaseSeconds& phases) {
  interval_.add(r, p_.global_batch, step_seconds);
  p_.log.live(step, position.epoch, r.local_loss, r.lr, interval_.samples_per_second(),
              p_.monitor.last().rss_bytes);
  if (step % p_.cfg.logging.every_steps != 0 && step != p_.total_steps) return;
  p_.steps.resolve_phases(phases);  // GPU: the device times of the interval's phases
  auto extra =
      throughput_fields(interval_.samples_per_second(), p_.model.forward_flops_per_sample(),
                        p_.tokens_per_sample, p_.env.grid.world_size(), p_.cfg.logging.peak_flops);
  extra["resources"] = resource_fields(p_.monitor.sample(), *p_.env.control.world);
  if (p_.sampler.is_mixture()) {
    extra["samples_per_source"] = source_counts(p_.sampler, interval_start_, position);
    interval_start_ = position;
  }
  // Each rank's compute and data wait per step of the interval, gathered (stragglers).
  const double compute = phases.forward + phases.backward + phases.optimizer;
  const double steps = static_cast<double>(std::max<std::int64_t>(1, interval_.steps));
  const auto times =
      p_.stragglers.observe(step, (compute - compute_logged_) / steps, interval_.data_wait / steps,
                            interval_.seconds / steps, *p_.env.control.world, p_.log);
  for (const auto& [key, value] : times.items()) extra[key] = value;
  compute_logged_ = compute;
  log_interval(interval_, step, position.epoch, *p_.env.control.dp, p_.log, extra);
  interval_ = IntervalStats{};
}

}  // namespace hpctrain::train
