#include "hpctrain/model/classifier.hpp"

namespace hpctrain::model {

LossOutput Classifier::loss(const torch::Tensor& logits, const torch::Tensor& labels) {
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

}  // namespace hpctrain::model
