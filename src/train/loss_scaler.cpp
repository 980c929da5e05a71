#include "hpctrain/train/loss_scaler.hpp"

#include <cmath>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {
namespace {

bool is_power_of_two(double x) {
  int exponent = 0;
  return x > 0 && std::isfinite(x) && std::frexp(x, &exponent) == 0.5;
}

}  // namespace

LossScaleConfig LossScaleConfig::from(ConfigSection& s) {
  LossScaleConfig c;
  c.mode = s.get_choice<LossScaleMode>("loss_scale", c.mode,
                                       {{"auto", LossScaleMode::kAuto},
                                        {"dynamic", LossScaleMode::kDynamic},
                                        {"none", LossScaleMode::kNone}});
  c.init = s.get<double>("loss_scale_init", c.init);
  c.window = s.get<std::int64_t>("loss_scale_window", c.window);
  c.growth = s.get<double>("loss_scale_growth", c.growth);
  c.backoff = s.get<double>("loss_scale_backoff", c.backoff);
  c.min = s.get<double>("loss_scale_min", c.min);
  // Powers of two keep scaling exact: any other factor would round every gradient twice.
  if (!is_power_of_two(c.init)) s.fail("loss_scale_init", "must be a power of two, e.g. 65536");
  if (c.window < 1) s.fail("loss_scale_window", "must be at least 1");
  if (!is_power_of_two(c.growth) || c.growth <= 1) {
    s.fail("loss_scale_growth", "must be a power of two above 1, e.g. 2");
  }
  if (!is_power_of_two(c.backoff) || c.backoff >= 1) {
    s.fail("loss_scale_backoff", "must be a power of two below 1, e.g. 0.5");
  }
  if (!(c.min > 0) || !std::isfinite(c.min)) s.fail("loss_scale_min", "must be positive");
  return c;
}

LossScaler::LossScaler(const LossScaleConfig& config, bool enabled)
    : config_(config), enabled_(enabled), scale_(config.init) {}

void LossScaler::update(bool nonfinite) {
  if (!enabled_) return;
  if (nonfinite) {
    scale_ *= config_.backoff;
    good_steps_ = 0;
    ++skipped_;
    return;
  }
  if (++good_steps_ >= config_.window) {
    scale_ *= config_.growth;
    good_steps_ = 0;
  }
}

nlohmann::json LossScaler::to_json() const {
  return {{"scale", scale_}, {"good_steps", good_steps_}, {"skipped", skipped_}};
}

void LossScaler::restore(const nlohmann::json& j) {
  if (j.is_null()) return;
  auto bad = [](const std::string& what) {
    return CheckpointError(str("manifest.json: trainer_state.loss_scaler", what,
                               ": the manifest was edited or was not written by hpctrain train; "
                               "resume from another checkpoint"));
  };
  if (!j.is_object()) throw bad(" should be an object");
  if (!j.contains("scale") || !j.at("scale").is_number() ||
      !is_power_of_two(j.at("scale").get<double>())) {
    throw bad(".scale should be a positive power of two");
  }
  for (const char* key : {"good_steps", "skipped"}) {
    if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<std::int64_t>() < 0) {
      throw bad(str(".", key, " should be a non-negative integer"));
    }
  }
  scale_ = j.at("scale").get<double>();
  good_steps_ = j.at("good_steps").get<std::int64_t>();
  skipped_ = j.at("skipped").get<std::int64_t>();
}

}  // namespace hpctrain::train
