#include "hpctrain/model/cnn.hpp"

#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

Cnn::Cnn(const std::vector<std::int64_t>& input_shape, const std::vector<std::int64_t>& channels,
         std::int64_t kernel, std::int64_t fc, std::int64_t num_classes, double dropout)
    : input_shape_(input_shape), dropout_(dropout) {
  std::int64_t c = input_shape[0];
  std::int64_t h = input_shape[1];
  std::int64_t w = input_shape[2];
  for (std::size_t i = 0; i < channels.size(); ++i) {
    auto options = torch::nn::Conv2dOptions(c, channels[i], kernel).padding(kernel / 2);
    convs_.push_back(register_module(str("conv", i + 1), torch::nn::Conv2d(options)));
    flops_ += 2.0 * c * kernel * kernel * channels[i] * h * w + channels[i] * h * w;
    c = channels[i];
    h /= 2;  // max pooling 2x2
    w /= 2;
  }
  const std::int64_t flat = c * h * w;
  fc1_ = register_module("fc1", torch::nn::Linear(flat, fc));
  fc2_ = register_module("fc2", torch::nn::Linear(fc, num_classes));
  flops_ += 2.0 * flat * fc + fc + 2.0 * fc * num_classes + num_classes;
}

torch::Tensor Cnn::forward(const torch::Tensor& inputs) {
  torch::Tensor x =
      inputs.reshape({inputs.size(0), input_shape_[0], input_shape_[1], input_shape_[2]});
  std::size_t unit = 0;
  for (auto& conv : convs_) {
    wait_for_parameters(*conv);
    x = leave_unit(unit, conv->forward(enter_unit(unit, x)));
    ++unit;
    x = torch::max_pool2d(torch::relu(x), 2);
  }
  wait_for_parameters(*fc1_);
  x = torch::relu(leave_unit(unit, linear(*fc1_, enter_unit(unit, x.flatten(1)))));
  ++unit;
  if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
  wait_for_parameters(*fc2_);
  return leave_unit(unit, linear(*fc2_, enter_unit(unit, x)));
}

std::vector<std::vector<std::string>> Cnn::parameter_units() const {
  std::vector<const torch::nn::Module*> modules;
  for (const auto& conv : convs_) modules.push_back(conv.get());
  modules.push_back(fc1_.get());
  modules.push_back(fc2_.get());
  return units_of(modules);
}

std::shared_ptr<Model> make_cnn(ConfigSection& section, const ModelContext& ctx) {
  auto input_shape =
      section.get<std::vector<std::int64_t>>("input_shape", ModelSpec::cnn_input_shape());
  auto channels = section.get<std::vector<std::int64_t>>("channels", {32, 64});
  auto kernel = section.get<std::int64_t>("kernel", 5);
  auto fc = section.get<std::int64_t>("fc", 1024);
  auto num_classes = section.get<std::int64_t>("num_classes", 10);
  auto dropout = section.get<double>("dropout", 0.0);
  if (input_shape.size() != 3) section.fail("input_shape", "must be [channels, height, width]");
  if (kernel < 1 || kernel % 2 == 0) section.fail("kernel", "must be a positive odd number");
  if (channels.empty()) section.fail("channels", "needs at least one convolution");
  std::int64_t h = input_shape[1];
  std::int64_t w = input_shape[2];
  for (std::size_t i = 0; i < channels.size(); ++i) {
    if (channels[i] < 1) section.fail("channels", "every channel count must be positive");
    h /= 2;
    w /= 2;
  }
  if (h < 1 || w < 1) section.fail("channels", "too many pooling stages for the input size");
  if (num_classes < 2) section.fail("num_classes", "must be at least 2");
  if (dropout < 0 || dropout >= 1) section.fail("dropout", "must be in [0, 1)");
  if (ctx.tp_size > 1) {
    section.fail("name", "the cnn model is data-parallel only: set parallel.tp=1");
  }
  return std::make_shared<Cnn>(input_shape, channels, kernel, fc, num_classes, dropout);
}

}  // namespace hpctrain::model
