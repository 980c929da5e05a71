#include "hpctrain/model/task_loss.hpp"

#include <algorithm>
#include <atomic>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {task_name(Task::kClassification),
                                                 task_name(Task::kLanguageModel),
                                                 task_name(Task::kRegression)};
  return names;
}

namespace {
std::atomic<bool> g_defer_on_cpu{false};
}  // namespace

void LossOutput::resolve() {
  if (!pending.defined()) return;
  torch::Tensor host;
  if (pending.device().is_cpu()) {
    host = pending.to(torch::kDouble);
  } else {
    // The device's loss waits behind the step's collectives: watched (comm/host_value.hpp).
    runtime::HostSyncScope watch("loss");
    host = pending.to(torch::kCPU, torch::kDouble);
  }
  const double* v = host.data_ptr<double>();
  loss_sum += v[0];
  correct += static_cast<std::int64_t>(v[1]);
  abs_error_sum += v[2];
  pending = torch::Tensor();
}

void defer_metric_reads_on_cpu(bool on) {
  g_defer_on_cpu = on;
}

void set_metric_sums(LossOutput& out, const torch::Tensor& loss_sum, const torch::Tensor& correct,
                     const torch::Tensor& abs_error_sum) {
  if (loss_sum.device().is_cpu() && !g_defer_on_cpu) {
    out.loss_sum = loss_sum.to(torch::kDouble).item<double>();
    if (correct.defined()) out.correct = correct.item<std::int64_t>();
    if (abs_error_sum.defined())
      out.abs_error_sum = abs_error_sum.to(torch::kDouble).item<double>();
    return;
  }
  auto as_double = [&loss_sum](const torch::Tensor& t) {
    return t.defined() ? t.to(torch::kDouble).reshape({})
                       : torch::zeros({}, loss_sum.options().dtype(torch::kDouble));
  };
  out.pending = torch::stack({as_double(loss_sum), as_double(correct), as_double(abs_error_sum)});
}

LossOutput classification_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  LossOutput out;
  // Sum in float32 over the batch, then divide: the sum is what distributed metrics reduce.
  torch::Tensor sum = torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat), labels,
      torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  out.count = labels.size(0);
  out.loss = sum / static_cast<double>(std::max<std::int64_t>(out.count, 1));
  set_metric_sums(out, sum.detach(), logits.detach().argmax(1).eq(labels).sum());
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
  set_metric_sums(out, sum.detach(), /*correct=*/torch::Tensor(), error.detach().abs().sum());
  return out;
}

LossOutput task_loss(Task task, const torch::Tensor& outputs, const torch::Tensor& targets) {
  switch (task) {
    case Task::kLanguageModel: return language_model_loss(outputs, targets);
    case Task::kRegression: return regression_loss(outputs, targets);
    case Task::kClassification: break;
  }
  return classification_loss(outputs, targets);
}

}  // namespace hpctrain::model
