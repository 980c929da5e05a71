#pragma once
// The `model` section as the rest of hpctrain sees it, parsed once: which model, the task it
// learns, the input it takes, its sequence length and vocabulary. The trainer checks the data
// against it before the model is built, `hpctrain plan` sizes runs with it, and offline
// evaluation reads the same struct back from a checkpoint's config (eval::RunConfig). Each model
// family reads its other keys (widths, layers, ...) itself when it is built (build_model).
// docs/CONFIG.md documents the keys.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/runtime/task.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::model {

struct ModelSpec {
  /// model.in_features of an mlp when absent (a Fashion-MNIST image, 28 x 28).
  static constexpr std::int64_t kMlpInFeatures = 784;
  /// model.input_shape of a cnn when absent: [channels, height, width].
  static const std::vector<std::int64_t>& cnn_input_shape();

  std::string name = "mlp";  ///< model.name: mlp | cnn | gpt | torchscript | a plugin's model
  /// The task the section declares: classification for mlp and cnn, language modelling for the
  /// gpt, model.task for a torchscript module; unknown (nullopt) for a plugin's model until it is
  /// built (Model::task()).
  std::optional<Task> task;
  /// One sample as the model takes it: [in_features] for an mlp, [channels, height, width] for
  /// a cnn; empty where the section does not say (the model checks a batch itself).
  std::vector<std::int64_t> input_shape;
  std::int64_t seq_len = 0;     ///< model.seq_len: tokens per sample (0: not a sequence model)
  std::int64_t vocab_size = 0;  ///< model.vocab_size of a language model (0: not declared)
  /// model.init_from: pretrained weights a fresh run starts from (empty: random initialisation;
  /// docs/MODELS.md, "Pretrained weights").
  std::string init_from;

  /// Reads and validates the keys above (recording defaults, as every section does); throws
  /// ConfigError naming the key. The keys are read in the order the model families read them.
  /// Local.
  static ModelSpec from(ConfigSection& section);
};

}  // namespace hpctrain::model
