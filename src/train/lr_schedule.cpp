#include "hpctrain/train/lr_schedule.hpp"

#include <cmath>

#include "hpctrain/runtime/config.hpp"

namespace hpctrain::train {

LrSchedule LrSchedule::from(ConfigSection& s) {
  LrSchedule l;
  l.kind = s.get_choice<Kind>(
      "name", l.kind,
      {{"constant", Kind::kConstant}, {"cosine", Kind::kCosine}, {"step", Kind::kStep}});
  l.warmup_steps = s.get<std::int64_t>("warmup_steps", l.warmup_steps);
  l.min_lr = s.get<double>("min_lr", l.min_lr);
  l.step_size = s.get<std::int64_t>("step_size", l.step_size);
  l.gamma = s.get<double>("gamma", l.gamma);
  if (l.warmup_steps < 0) s.fail("warmup_steps", "must be >= 0");
  if (l.min_lr < 0) s.fail("min_lr", "must be >= 0");
  if (l.step_size < 1) s.fail("step_size", "must be at least 1");
  if (l.gamma <= 0 || l.gamma > 1) s.fail("gamma", "must be in (0, 1]");
  return l;
}

double LrSchedule::lr(double base_lr, std::int64_t step, std::int64_t total_steps) const {
  if (warmup_steps > 0 && step < warmup_steps) {
    return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == Kind::kCosine) {
    const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
    const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
    return min_lr + 0.5 * (base_lr - min_lr) * (1 + std::cos(M_PI * progress));
  }
  if (kind == Kind::kStep) {
    return base_lr * std::pow(gamma, static_cast<double>((step - warmup_steps) / step_size));
  }
  return base_lr;
}

}  // namespace hpctrain::train
