#pragma once
// Learning-rate schedules: a pure function of the optimizer step, so resuming needs only the step.

#include <cstdint>
#include <string>

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::train {

/// The schedule section. docs/CONFIG.md documents every key.
struct LrSchedule {
  enum class Kind { kConstant, kCosine, kStep };
  Kind kind = Kind::kConstant;    ///< schedule.name: constant | cosine | step
  std::int64_t warmup_steps = 0;  ///< linear warmup from lr/warmup_steps to lr
  double min_lr = 0.0;            ///< cosine: the floor reached at the last step
  std::int64_t step_size = 1000;  ///< step: multiply by gamma every step_size steps
  double gamma = 0.1;

  /// Reads and validates the section. Local.
  static LrSchedule from(ConfigSection& section);
  /// Learning rate for 0-based optimizer step `step` of `total_steps`, base rate `base_lr`. Local.
  double lr(double base_lr, std::int64_t step, std::int64_t total_steps) const;
};

}  // namespace hpctrain::train
