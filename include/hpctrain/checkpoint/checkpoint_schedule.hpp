#pragma once
// When a training run saves: the `checkpoint` config section and the schedule built from it.
// The training loop asks the schedule after each step and saves when it answers; the schedule owns
// the cadence (every N steps, every M minutes, at the end, on an agreed stop), the loop owns
// nothing of it. docs/CONFIG.md documents the keys.

#include <chrono>
#include <cstdint>

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::checkpoint {

/// The `checkpoint` section. Defaults are declared here and nowhere else.
struct CheckpointConfig {
  std::int64_t every_steps = 0;  ///< checkpoint.every_steps: 0 = not by steps
  double every_minutes = 0;      ///< checkpoint.every_minutes: 0 = not by time
  int keep = 2;                  ///< checkpoint.keep: newest checkpoints kept (>= 2), plus the best
  bool keep_best = true;         ///< checkpoint.keep_best: also keep the best by the eval metric
  bool at_end = true;            ///< checkpoint.at_end: save after the last step
  bool background = true;        ///< checkpoint.background: write files on a background thread

  /// Reads and validates the section (recording defaults); throws ConfigError naming the key.
  /// Local.
  static CheckpointConfig from(ConfigSection& section);
};

/// Why a step is saved.
enum class SaveReason { kNone, kInterval, kTime, kStop, kEnd };

/// "interval", "time interval", "stop request", "end of run" (kNone: ""). Local.
const char* save_reason_name(SaveReason reason);

class CheckpointSchedule {
 public:
  using Clock = std::chrono::steady_clock;

  /// `last_saved_step`: the step of the checkpoint the run resumed from (-1: none). The time
  /// interval counts from construction. Local.
  explicit CheckpointSchedule(const CheckpointConfig& config, std::int64_t last_saved_step = -1);

  /// Whether this rank's clock says the time interval has passed since the last save. Ranks'
  /// clocks differ: feed it to the stop agreement and pass the agreed value to reason(). Local.
  bool time_due() const;
  /// Whether to save after `step` and why. `last_step`: no step follows (the budget is spent or
  /// the run stops); `stop_requested`: an agreed stop that must save (signal, deadline);
  /// `time_due`: the agreed time_due(). Never saves the same step twice. Local (the same on every
  /// rank when the inputs are agreed).
  SaveReason reason(std::int64_t step, bool last_step, bool stop_requested, bool time_due) const;
  /// Records that `step` was saved now. Local.
  void saved(std::int64_t step);
  /// The step saved last (-1: none). Local.
  std::int64_t last_saved_step() const { return last_saved_step_; }

 private:
  CheckpointConfig config_;
  std::int64_t last_saved_step_;
  Clock::time_point last_save_time_;
};

}  // namespace hpctrain::checkpoint
