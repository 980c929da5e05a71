// A small residual network for 1x28x28 images (Fashion-MNIST), as a model of one's own:
//
//   model: {name: resnet, channels: 8, blocks: 2, num_classes: 10}
//
// stem: conv 3x3 (1 -> C) + ReLU; `blocks` residual blocks x + conv(relu(conv(x))) at 28x28;
// 2x2 max pooling; a linear classifier on the pooled features. Parameters (state_dict names):
// stem.weight, stem.bias, blocks.<i>.conv1.weight/bias, blocks.<i>.conv2.weight/bias,
// head.weight, head.bias.

#include <hpctrain/model/classifier.hpp>
#include <hpctrain/runtime/config.hpp>

namespace {

using hpctrain::ConfigSection;
using hpctrain::model::Classifier;
using hpctrain::model::Model;
using hpctrain::model::ModelContext;

constexpr std::int64_t kSide = 28;

struct ResidualBlock : torch::nn::Module {
  explicit ResidualBlock(std::int64_t channels) {
    auto options = torch::nn::Conv2dOptions(channels, channels, 3).padding(1);
    conv1 = register_module("conv1", torch::nn::Conv2d(options));
    conv2 = register_module("conv2", torch::nn::Conv2d(options));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(x + conv2->forward(torch::relu(conv1->forward(x))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
};

class ResNet : public Classifier {
 public:
  ResNet(std::int64_t channels, std::int64_t blocks, std::int64_t num_classes)
      : channels_(channels) {
    stem_ = register_module("stem",
                            torch::nn::Conv2d(torch::nn::Conv2dOptions(1, channels, 3).padding(1)));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (std::int64_t i = 0; i < blocks; ++i) {
      blocks_->push_back(std::make_shared<ResidualBlock>(channels));
    }
    head_ = register_module("head",
                            torch::nn::Linear(channels * (kSide / 2) * (kSide / 2), num_classes));
    // Multiply-adds count 2: the stem, two convolutions per block, the classifier.
    const double pixels = kSide * kSide;
    flops_ = 2.0 * pixels * 9 * channels * (1 + 2.0 * blocks * channels) +
             2.0 * channels * (kSide / 2) * (kSide / 2) * num_classes;
  }

  torch::Tensor forward(const torch::Tensor& inputs) override {
    torch::Tensor x = torch::relu(stem_->forward(inputs.reshape({-1, 1, kSide, kSide})));
    for (const auto& block : *blocks_) x = block->as<ResidualBlock>()->forward(x);
    return head_->forward(torch::max_pool2d(x, 2).flatten(1));
  }
  double forward_flops_per_sample() const override { return flops_; }

 private:
  std::int64_t channels_;
  torch::nn::Conv2d stem_{nullptr};
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::Linear head_{nullptr};
  double flops_ = 0;
};

// Reads the model section (every key it reads is a known key; others are refused by hpctrain
// with a "did you mean") and checks it before anything runs.
std::shared_ptr<Model> make_resnet(ConfigSection& section, const ModelContext& ctx) {
  const auto channels = section.get<std::int64_t>("channels", 8);
  const auto blocks = section.get<std::int64_t>("blocks", 2);
  const auto num_classes = section.get<std::int64_t>("num_classes", 10);
  if (channels < 1) section.fail("channels", "must be positive");
  if (blocks < 0) section.fail("blocks", "must be >= 0");
  if (num_classes < 2) section.fail("num_classes", "must be at least 2");
  if (ctx.tp_size > 1)
    section.fail("name", "the resnet model is data parallel only: set parallel.tp=1");
  return std::make_shared<ResNet>(channels, blocks, num_classes);
}

}  // namespace

HPCTRAIN_REGISTER_MODEL("resnet", make_resnet);
