#include "hpctrain/model/task_loss.hpp"

#include <algorithm>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"classification", "language_model", "regression"};
  return names;
}

LossOutput classification_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  LossOutput out;
  // Sum in float32 over the batch, then divide: the sum is what distributed metrics reduce.
  torch::Tensor sum = torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat), labels,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  out.count = labels.size(0);
  out.loss = sum / static_cast<double>(std::max<std::int64_t>(out.count, 1));
  out.loss_sum = sum.detach().to(torch::kDouble).item<double>();
  out.correct = logits.detach().argmax(1).eq(labels).sum().item<std::int64_t>();
  return out;
}

LossOutput language_model_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  const std::int64_t vocab = logits.size(-1);
  return classification_loss(logits.reshape({-1, vocab}), targets.reshape({-1}));
}

LossOutput regression_loss(const torch::Tensor& predictions, const torch::Tensor& targets) {
  LossOutput out;
  torch::Tensor error = predictions.to(torch::kFloat) - targets;
  torch::Tensor sum = error.pow(2).sum();
  out.count = targets.numel();
  out.loss = sum / static_cast<double>(std::max<std::int64_t>(out.count, 1));
  out.loss_sum = sum.detach().to(torch::kDouble).item<double>();
  out.abs_error_sum = error.detach().abs().sum().to(torch::kDouble).item<double>();
  return out;
}

LossOutput task_loss(const std::string& task, const torch::Tensor& outputs,
                     const torch::Tensor& targets) {
  if (task == "classification") return classification_loss(outputs, targets);
  if (task == "language_model") return language_model_loss(outputs, targets);
  if (task == "regression") return regression_loss(outputs, targets);
  throw Error(str("unknown task '", task, "' (internal error)"));
}

}  // namespace hpctrain::model
