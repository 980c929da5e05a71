#include "hpctrain/model/mlp.hpp"

#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

Mlp::Mlp(std::int64_t in_features, const std::vector<std::int64_t>& hidden,
         std::int64_t num_classes, double dropout)
    : dropout_(dropout) {
  std::int64_t width = in_features;
  std::vector<std::int64_t> sizes = hidden;
  sizes.push_back(num_classes);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    layers_.push_back(register_module(str("fc", i + 1), torch::nn::Linear(width, sizes[i])));
    width = sizes[i];
  }
}

torch::Tensor Mlp::forward(const torch::Tensor& inputs) {
  torch::Tensor x = inputs.flatten(1);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    wait_for_parameters(*layers_[i]);
    x = leave_unit(i, linear(*layers_[i], enter_unit(i, x)));
    if (i + 1 < layers_.size()) {
      x = torch::relu(x);
      if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    }
  }
  return x;
}

std::vector<std::vector<std::string>> Mlp::parameter_units() const {
  std::vector<const torch::nn::Module*> modules;
  for (const auto& layer : layers_) modules.push_back(layer.get());
  return units_of(modules);
}

double Mlp::forward_flops_per_sample() const {
  double flops = 0;
  for (const auto& layer : layers_) {
    const auto& w = layer->weight;
    flops += 2.0 * w.size(0) * w.size(1) + w.size(0);  // multiply-adds, then the bias
  }
  return flops;
}

std::shared_ptr<Model> make_mlp(ConfigSection& section, const ModelContext& ctx) {
  auto in_features = section.get<std::int64_t>("in_features", ModelSpec::kMlpInFeatures);
  auto hidden = section.get<std::vector<std::int64_t>>("hidden", {256, 128, 100});
  auto num_classes = section.get<std::int64_t>("num_classes", 10);
  auto dropout = section.get<double>("dropout", 0.0);
  if (in_features < 1) section.fail("in_features", "must be positive");
  if (num_classes < 2) section.fail("num_classes", "must be at least 2");
  for (auto h : hidden) {
    if (h < 1) section.fail("hidden", "every hidden width must be positive");
  }
  if (dropout < 0 || dropout >= 1) section.fail("dropout", "must be in [0, 1)");
  if (ctx.tp_size > 1) {
    section.fail("name",
                 "the mlp model is data-parallel only: set parallel.tp=1 (tensor "
                 "parallelism is implemented for the gpt model)");
  }
  return std::make_shared<Mlp>(in_features, hidden, num_classes, dropout);
}

}  // namespace hpctrain::model
