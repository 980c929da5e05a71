#pragma once
// Convolutional classifier: [Conv(k x k, same padding) + ReLU + MaxPool(2)] per entry of
// `channels`, then Linear(fc) + ReLU and a Linear classifier; the Fashion-MNIST benchmark's
// "2 Conv+pooling" network with channels [32, 64], kernel 5, fc 1024.
// Parameters: conv1.weight, conv1.bias, conv2..., fc1.weight, fc1.bias, fc2.weight, fc2.bias.

#include <vector>

#include "hpctrain/model/classifier.hpp"

namespace hpctrain::model {

class Cnn : public Classifier {
 public:
  Cnn(const std::vector<std::int64_t>& input_shape, const std::vector<std::int64_t>& channels,
      std::int64_t kernel, std::int64_t fc, std::int64_t num_classes, double dropout);
  torch::Tensor forward(const torch::Tensor& inputs) override;
  bool waits_for_parameters() const override { return true; }
  /// One unit per convolution, then the two linear layers.
  std::vector<std::vector<std::string>> parameter_units() const override;
  double forward_flops_per_sample() const override { return flops_; }

 private:
  std::vector<std::int64_t> input_shape_;  // C, H, W
  std::vector<torch::nn::Conv2d> convs_;
  torch::nn::Linear fc1_{nullptr};
  torch::nn::Linear fc2_{nullptr};
  double dropout_;
  double flops_ = 0;
};

}  // namespace hpctrain::model
