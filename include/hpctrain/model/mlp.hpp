#pragma once
// Multi-layer perceptron: flatten, then Linear + ReLU layers, then a Linear classifier.
// model: {name: mlp, in_features: 784, hidden: [256, 128, 100], num_classes: 10, dropout: 0}
// Parameters: fc1.weight, fc1.bias, ..., fcK.weight, fcK.bias (K = len(hidden) + 1).

#include <vector>

#include "hpctrain/model/classifier.hpp"

namespace hpctrain::model {

class Mlp : public Classifier {
 public:
  Mlp(std::int64_t in_features, const std::vector<std::int64_t>& hidden, std::int64_t num_classes,
      double dropout);
  torch::Tensor forward(const torch::Tensor& inputs) override;
  bool waits_for_parameters() const override { return true; }
  /// One unit per linear layer.
  std::vector<std::vector<std::string>> parameter_units() const override;
  double forward_flops_per_sample() const override;

 private:
  std::vector<torch::nn::Linear> layers_;
  double dropout_;
};

}  // namespace hpctrain::model
