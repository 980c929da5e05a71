#pragma once
// Base of the classification models: cross-entropy loss and top-1 accuracy sums over a batch.

#include "hpctrain/model/model.hpp"

namespace hpctrain::model {

class Classifier : public Model {
 public:
  /// Mean cross entropy of logits [B, C] against int64 labels [B], with the loss sum and the
  /// number of correct top-1 predictions. Local.
  LossOutput loss(const torch::Tensor& logits, const torch::Tensor& labels) override;
  Task task() const override { return Task::kClassification; }
};

}  // namespace hpctrain::model
