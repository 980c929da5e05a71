#pragma once
// A model the user wrote in PyTorch and saved as TorchScript (data parallel only):
//
//   model: {name: torchscript, file: model.pt, task: classification}
//
//   m = torch.jit.script(MyModel())     # in Python
//   m.save("model.pt")
//
// The module's forward(inputs) returns logits [B, C] (classification), [B, T, V] (language
// model) or predictions shaped like the targets (regression); hpctrain computes the task's loss
// and metrics (task_loss.hpp). Parameters and buffers keep their TorchScript names (those of the
// module's PyTorch state_dict): this model registers the module's own tensors under those names,
// so FlatParameters moves them into the flat buffer and checkpoints name them like PyTorch does.
// train()/eval() switch the module's training flag (dropout, BatchNorm); dropout draws from
// LibTorch's default CPU generator, which checkpoints save and restore.

#include <torch/script.h>

#include <string>
#include <vector>

#include "hpctrain/model/model.hpp"

namespace hpctrain::model {

/// The model section of a TorchScript model, validated.
struct TorchScriptOptions {
  std::string file;                   ///< model.file
  Task task = Task::kClassification;  ///< model.task
  double flops_per_sample = 0;        ///< model.flops_per_sample (0: count with the profiler)
};

class TorchScriptModel : public Model {
 public:
  /// Loads `options.file` with torch::jit::load and checks forward's signature. Throws
  /// ConfigError (a missing file, not TorchScript, a forward that takes or returns anything but
  /// one Tensor). Local.
  explicit TorchScriptModel(const TorchScriptOptions& options);

  /// The module's forward(inputs). Local.
  torch::Tensor forward(const torch::Tensor& inputs) override;
  /// The task's loss (task_loss.hpp). Local.
  LossOutput loss(const torch::Tensor& outputs, const torch::Tensor& targets) override;
  Task task() const override { return options_.task; }
  /// model.flops_per_sample, else what the profiler counted in check_batch (0 before). Local.
  double forward_flops_per_sample() const override;
  std::string flops_source() const override;
  /// Runs forward on the batch and checks the output's shape against the task and targets;
  /// counts FLOPs with the profiler on the way. Throws ConfigError naming the shapes seen. Local.
  void check_batch(const torch::Tensor& inputs, const torch::Tensor& targets,
                   std::int64_t num_classes, const std::string& where) override;

  /// Sets this wrapper's and the module's training flag. Local.
  void train(bool on = true) override;
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

  /// The loaded module (its parameters are this model's parameters). Local.
  torch::jit::Module& module() { return module_; }
  /// Operations of forward whose training flag is a constant (a traced module: dropout and
  /// BatchNorm frozen in the mode they were traced in), as "aten::dropout(train=False)". Local.
  const std::vector<std::string>& frozen_mode_ops() const { return frozen_ops_; }

 private:
  void register_tensors();

  TorchScriptOptions options_;
  torch::jit::Module module_;
  std::vector<std::string> frozen_ops_;
  double counted_flops_per_sample_ = 0;
};

/// Reads model.{file, task, flops_per_sample} for a tp group of `tp_size` ranks (tp > 1 is an
/// error: TorchScript models are data parallel only). Throws ConfigError naming the key. Local.
TorchScriptOptions read_torchscript_options(ConfigSection& section, int tp_size);

/// Forward FLOPs of `fn()` (a multiply-add counts 2) as LibTorch's profiler estimates them for
/// matrix products and convolutions (aten::mm, addmm, bmm, baddbmm, conv2d, ...). Local: counts
/// the operations this thread runs.
double count_forward_flops(const std::function<void()>& fn);

}  // namespace hpctrain::model
