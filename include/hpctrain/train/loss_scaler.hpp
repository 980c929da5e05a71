#pragma once
// Dynamic loss scaling for float16 training (the rules of torch.cuda.amp.GradScaler): the loss is
// multiplied by a power-of-two scale before backward so small float16 gradients do not flush to
// zero; gradients are divided by it again before the norm, clipping and the update. A step whose
// gradients are not finite on any rank is skipped on every rank and the scale is halved; after
// `window` good steps in a row the scale doubles. Powers of two make scaling and unscaling exact
// in float32, so a float32 run with loss scaling and no overflow is bitwise the run without it.

#include <cstdint>
#include <nlohmann/json.hpp>

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::train {

/// optim.loss_scale: `auto` (dynamic with run.precision = fp16, none otherwise), `dynamic`, `none`.
enum class LossScaleMode { kAuto, kDynamic, kNone };

/// The optim.loss_scale* keys; docs/CONFIG.md documents them. Defaults as GradScaler's.
struct LossScaleConfig {
  LossScaleMode mode = LossScaleMode::kAuto;
  double init = 65536.0;       ///< optim.loss_scale_init: the first scale (a power of two)
  std::int64_t window = 2000;  ///< optim.loss_scale_window: good steps before the scale grows
  double growth = 2.0;         ///< optim.loss_scale_growth: factor after a window of good steps
  double backoff = 0.5;        ///< optim.loss_scale_backoff: factor after a non-finite step
  double min = 1.0;            ///< optim.loss_scale_min: below this, optim.on_nonfinite decides
  /// Reads and validates the keys of the optim section; throws ConfigError naming the key. Local.
  static LossScaleConfig from(ConfigSection& section);
};

/// The scaler's state: scale and good steps since the last change. Local (every rank keeps the
/// same state: its input, the non-finite flag, is agreed over the world first).
class LossScaler {
 public:
  /// `enabled` false: scale() is 1 and update() does nothing.
  LossScaler(const LossScaleConfig& config, bool enabled);
  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? scale_ : 1.0; }
  /// Good steps since the scale last changed.
  std::int64_t good_steps() const { return good_steps_; }
  /// Total steps skipped for non-finite gradients since construction (or restore).
  std::int64_t skipped() const { return skipped_; }
  /// After a step: `nonfinite` (agreed over every rank) skips it and backs off; otherwise the
  /// good-step count grows, and the scale with it after a full window.
  void update(bool nonfinite);
  /// True when the last back-off took the scale below optim.loss_scale_min.
  bool below_min() const { return enabled_ && scale_ < config_.min; }
  /// {"scale", "good_steps", "skipped"} for the checkpoint's trainer state.
  nlohmann::json to_json() const;
  /// Restores to_json()'s fields; throws CheckpointError naming a bad field. A state from a run
  /// without scaling (null) keeps the initial values.
  void restore(const nlohmann::json& j);

 private:
  LossScaleConfig config_;
  bool enabled_;
  double scale_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace hpctrain::train
