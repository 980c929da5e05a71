#include "hpctrain/model/classifier.hpp"

#include "hpctrain/model/task_loss.hpp"

namespace hpctrain::model {

LossOutput Classifier::loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return classification_loss(logits, labels);
}

}  // namespace hpctrain::model
