#pragma once
// run.precision as one type every layer can name (train, eval, checkpoint, plan): its name, the
// choices a config may give, and the size of an activation element. Header-only and free of
// LibTorch, so the pure plan library uses it too; the autocast dtype of a precision is
// autocast_dtype() in compat/torch_compat.hpp, the LibTorch side.

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain {

class ConfigSection;

/// Arithmetic of the training step and of evaluation: float32, or bfloat16 / float16 autocast with
/// float32 master weights, gradients and optimizer state (float16 on CUDA only, with loss
/// scaling).
enum class Precision { kFp32, kBf16, kFp16 };

/// "fp32", "bf16", "fp16": the config's and the results' word. Local.
inline const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: break;
  }
  return "fp32";
}

/// The choices of run.precision, for ConfigSection::get_choice. Local.
inline const std::vector<std::pair<std::string, Precision>>& precision_choices() {
  static const std::vector<std::pair<std::string, Precision>> choices{
      {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}};
  return choices;
}

/// The precision named `name`, or nullopt. Local.
inline std::optional<Precision> precision_from_name(const std::string& name) {
  for (const auto& [n, p] : precision_choices()) {
    if (n == name) return p;
  }
  return std::nullopt;
}

/// Bytes of one activation element under `precision`: 4 for float32, 2 for bfloat16 and float16
/// autocast (parameters, gradients and optimizer state stay float32 whatever the precision).
/// Local.
inline int activation_element_bytes(Precision precision) {
  return precision == Precision::kFp32 ? 4 : 2;
}

/// The `run` section's keys on arithmetic, read by one parser for training (TrainConfig) and, from
/// a checkpoint's config, for offline evaluation (eval::RunConfig), so an evaluation computes as
/// the training did.
struct PrecisionConfig {
  Precision precision = Precision::kFp32;  ///< run.precision: fp32 | bf16 | fp16
  /// run.tf32: float32 matrix products and convolutions on CUDA may use TF32 (true) or not
  /// (false); absent: LibTorch's default, as PyTorch's (matmul off, cuDNN convolutions on).
  std::optional<bool> tf32;
  /// Reads run.precision and run.tf32 from the `run` section; throws ConfigError naming the key.
  /// Local. (Defined in the runtime library: the plan names Precision without linking it.)
  static PrecisionConfig from(ConfigSection& run);
};

}  // namespace hpctrain
