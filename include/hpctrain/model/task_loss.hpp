#pragma once
// The loss and metric sums of each task, shared by the built-in models and the user's own
// (TorchScript or plugin) models, so every model of a task is scored the same way.
//
//   classification  logits [B, C], int64 labels [B]: cross entropy; correct = top-1 hits;
//                   count = B
//   language_model  logits [B, T, V], int64 targets [B, T]: cross entropy per token;
//                   correct = top-1 token hits; count = B * T
//   regression      predictions and float32 targets of one shape [B, ...]: squared error;
//                   abs_error_sum = sum of |error|; count = elements of the targets

#include <string>
#include <vector>

#include "hpctrain/model/model.hpp"

namespace hpctrain::model {

/// The names of the tasks a model can have (task_name()), for config choices. Local.
const std::vector<std::string>& task_names();

/// Mean cross entropy of `logits` [B, C] against int64 `labels` [B], with the loss sum and the
/// number of correct top-1 predictions. Local.
LossOutput classification_loss(const torch::Tensor& logits, const torch::Tensor& labels);

/// Mean next-token cross entropy of unsharded `logits` [B, T, V] against int64 `targets`
/// [B, T], per token. Local.
LossOutput language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets);

/// Mean squared error of `predictions` against float `targets` of the same shape, over every
/// element; abs_error_sum feeds the mean absolute error. Local.
LossOutput regression_loss(const torch::Tensor& predictions, const torch::Tensor& targets);

/// Fills `out`'s metric sums from scalar tensors (`correct` and `abs_error_sum` may be undefined,
/// counting 0: regression has no correct predictions, classification no absolute error): read at
/// once on CPU, left on the device in out.pending elsewhere (and on CPU too while deferred reads
/// are forced, below). Local.
void set_metric_sums(LossOutput& out, const torch::Tensor& loss_sum, const torch::Tensor& correct,
                     const torch::Tensor& abs_error_sum = {});

/// Makes set_metric_sums defer its reads on CPU too, so tests run the GPU path's metric handling
/// on CPU (debug.stage_inputs). Process-wide; set before training starts. Local.
void defer_metric_reads_on_cpu(bool on);

/// The loss of `task`. Local.
LossOutput task_loss(Task task, const torch::Tensor& outputs, const torch::Tensor& targets);

}  // namespace hpctrain::model
