#pragma once
// Optimizers over the flat parameter buffer: SGD (momentum, Nesterov), Adam and AdamW, with the
// update rules of torch.optim (so results can be compared with PyTorch). Each update is a few
// vectorised operations over the whole buffer instead of a loop over parameters.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/parallel/data_parallel_strategy.hpp"
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
  /// Local. State tensors start at zero as torch.optim's do. The optimizer updates `segments`
  /// (the data-parallel strategy's: the whole flat buffer, or this dp rank's owned chunks when
  /// sharded) and keeps state for them alone, packed one after another. `sharded`: whether the
  /// segments are this rank's part only (for the ledger).
  Optimizer(std::vector<parallel::OptimizerSegment> segments, const OptimizerConfig& config,
            bool sharded);

  /// One update of every segment with learning rate `lr`, from their gradients. Local.
  void step(double lr);
  /// Updates done so far (Adam's bias correction step). Local.
  std::int64_t steps() const { return steps_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }
  /// Named state buffers ("exp_avg", "exp_avg_sq", "momentum_buffer"): the segments packed one
  /// after another (DataParallelStrategy::gather_state makes the checkpoint layout of those).
  /// For checkpoints. Local.
  std::vector<std::pair<std::string, torch::Tensor>> state();
  /// Whether the state covers only this dp rank's owned ranges. Local.
  bool sharded() const { return sharded_; }
  const OptimizerConfig& config() const { return config_; }
  /// "fused" where Adam/AdamW runs in LibTorch's fused multi-tensor kernel (CUDA, LibTorch 2.x),
  /// else "host loop" (float32 on the CPU) or "tensor ops". Local.
  const char* kernel() const {
    return fused_ ? "fused" : fusable_cpu() ? "host loop" : "tensor ops";
  }

 private:
  /// The update of every segment in one fused kernel; false (and the unfused path from now on)
  /// when LibTorch refuses it.
  bool fused_step(double lr);
  bool fusable_cpu() const;
  /// The update rule on one segment, whose state starts at `state_offset`.
  void step_segment(const parallel::OptimizerSegment& segment, std::int64_t state_offset,
                    double lr);

  std::vector<parallel::OptimizerSegment> segments_;
  OptimizerConfig config_;
  bool sharded_ = false;
  std::int64_t steps_ = 0;
  torch::Tensor exp_avg_;
  torch::Tensor exp_avg_sq_;
  torch::Tensor momentum_;
  torch::Tensor scratch_;
  bool fused_ = false;        ///< compat::AdamKernel::kFusedDevice chosen
  torch::Tensor step_count_;  ///< the fused kernel's update count, on the device
};

}  // namespace hpctrain::train
