#include "hpctrain/runtime/precision.hpp"

#include "hpctrain/runtime/config.hpp"

namespace hpctrain {

PrecisionConfig PrecisionConfig::from(ConfigSection& run) {
  PrecisionConfig c;
  c.precision = run.get_choice<Precision>("precision", c.precision, precision_choices());
  if (run.has("tf32")) c.tf32 = run.get<bool>("tf32", false);
  return c;
}

}  // namespace hpctrain
