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

void check_model_input_fits_data(ConfigSection& model_section, const data::DatasetInfo& info,
                                 const std::string& key) {
  if (info.kind != data::DatasetKind::kClassification) return;
  const std::string name = model_section.get<std::string>("name", "mlp");
  const std::int64_t values = product(info.sample_shape);
  if (name == "mlp") {
    const auto in_features = model_section.get<std::int64_t>("in_features", 784);
    if (in_features != values) {
      throw DataError(str(key, " = ", info.path, ": samples of shape ",
                          shape_text(info.sample_shape), " (", values,
                          " values) do not fit model.in_features = ", in_features,
                          ": set model.in_features = ", values));
    }
  } else if (name == "cnn") {
    const auto input_shape =
        model_section.get<std::vector<std::int64_t>>("input_shape", {1, 28, 28});
    if (product(input_shape) != values) {
      throw DataError(str(key, " = ", info.path, ": samples of shape ",
                          shape_text(info.sample_shape), " do not fit model.input_shape = [",
                          shape_text(input_shape),
                          "]: set model.input_shape to the samples' [channels, height, width]"));
    }
  }
}

}  // namespace hpctrain::train
