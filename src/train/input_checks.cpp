#include "input_checks.hpp"

#include <cstdint>
#include <vector>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {
namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (auto d : shape) out += (out.empty() ? "" : " x ") + std::to_string(d);
  return out.empty() ? "scalar" : out;
}

std::int64_t product(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

void check_model_input_fits_data(const model::ModelSpec& spec, const data::DatasetInfo& info,
                                 const std::string& key) {
  if (info.kind != Task::kClassification || spec.input_shape.empty()) return;
  const std::int64_t values = product(info.sample_shape);
  if (product(spec.input_shape) == values) return;
  if (spec.name == "mlp") {
    throw DataError(str(key, " = ", info.path, ": samples of shape ", shape_text(info.sample_shape),
                        " (", values, " values) do not fit model.in_features = ",
                        spec.input_shape[0], ": set model.in_features = ", values));
  }
  throw DataError(str(key, " = ", info.path, ": samples of shape ", shape_text(info.sample_shape),
                      " do not fit model.input_shape = [", shape_text(spec.input_shape),
                      "]: set model.input_shape to the samples' [channels, height, width]"));
}

}  // namespace hpctrain::train
