#pragma once
// Optimizers over the flat parameter buffer: SGD (momentum, Nesterov), Adam and AdamW, with the
// update rules of torch.optim (so results can be compared with PyTorch). Each update is a few
// vectorised operations over the whole buffer instead of a loop over parameters.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/train/loss_scaler.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::train {

enum class OptimizerKind { kSgd, kAdam, kAdamW };
/// What a step whose gradient norm is not finite does: fail the run (exit 6) or skip the update.
enum class NonFinitePolicy { kStop, kSkip };

/// The optim section. docs/CONFIG.md documents every key.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdam;  ///< optim.name: sgd | adam | adamw
  double lr = 1e-3;
  double momentum = 0.0;      ///< sgd
  bool nesterov = false;      ///< sgd
  double weight_decay = 0.0;  ///< L2 for sgd/adam, decoupled for adamw
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double grad_clip = 0.0;     ///< global-norm clipping threshold; 0 = off
  int grad_accumulation = 1;  ///< micro-batches per optimizer step
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;  ///< optim.on_nonfinite: stop | skip
  LossScaleConfig loss_scale;  ///< optim.loss_scale* (dynamic loss scaling, fp16)
  /// Reads and validates the section; throws ConfigError naming the key. Local.
  static OptimizerConfig from(ConfigSection& section);
};

class Optimizer {
 public:
  /// Local. State tensors are allocated lazily as torch.optim does (zeros).
  Optimizer(parallel::FlatParameters& flat, const OptimizerConfig& config);

  /// One update of every parameter with learning rate `lr`, from the gradients in the flat
  /// gradient buffer. Local.
  void step(double lr);
  /// Updates done so far (Adam's bias correction step). Local.
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  /// Named flat state buffers ("exp_avg", "exp_avg_sq", "momentum_buffer"), each laid out like
  /// the flat parameters. For checkpoints. Local.
  std::vector<std::pair<std::string, torch::Tensor>> state();
  const OptimizerConfig& config() const { return config_; }

 private:
  parallel::FlatParameters& flat_;
  OptimizerConfig config_;
  std::int64_t steps_ = 0;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  torch::Tensor momentum_;
  torch::Tensor scratch_;
};

}  // namespace hpctrain::train
