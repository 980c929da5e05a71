#pragma once
// The model interface every model in the zoo implements, and the registry that builds one by
// name from the config's model section. Parameter names follow PyTorch's state_dict naming
// ("fc1.weight", "blocks.0.attn.qkv.weight") so checkpoints are readable by other tools.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain {
class ConfigSection;
namespace comm {
class Communicator;
}
}  // namespace hpctrain

namespace hpctrain::model {

/// Where the model is built: its tensor-parallel group and the seed its initialisation draws from.
struct ModelContext {
  std::shared_ptr<comm::Communicator> tp;  ///< tensor-parallel group (size 1 when tp is off)
  int tp_rank = 0;
  int tp_size = 1;
  std::uint64_t seed = 0;
};

/// How a parameter's local tensor relates to the logical (unsharded) tensor.
struct ShardInfo {
  std::vector<std::int64_t> logical_shape;
  int split_dim = -1;  ///< dimension split across tp ranks in rank order; -1 = replicated
};

/// Loss of one batch. `loss` (mean over the samples or tokens of this rank's batch) is what
/// backward runs on; the sums are what distributed metrics reduce (docs/ARCHITECTURE.md, invariant
/// 5).
struct LossOutput {
  torch::Tensor loss;        ///< scalar, differentiable
  double loss_sum = 0;       ///< sum of per-sample (per-token) losses
  std::int64_t correct = 0;  ///< top-1 correct predictions
  std::int64_t count = 0;    ///< samples (classification) or tokens (language modelling)
};

class Model : public torch::nn::Module {
 public:
  /// Model outputs for a batch of inputs (logits; for vocabulary-parallel models, this rank's
  /// shard of them). Collective over the tp group when tp > 1.
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  /// Loss and metric sums of `outputs` against `targets`. Collective over the tp group when tp > 1.
  virtual LossOutput loss(const torch::Tensor& outputs, const torch::Tensor& targets) = 0;
  /// "classification" or "language_model". Local.
  virtual std::string task() const = 0;
  /// Forward FLOPs for one sample (a multiply-add counts 2), counted from the layers; the whole
  /// logical model, not this rank's shard. Local.
  virtual double forward_flops_per_sample() const = 0;
  /// How parameter `name` is sharded (default: replicated, logical shape = local shape). Local.
  virtual ShardInfo shard_info(const std::string& name) const;
  /// Parameters of the logical model (all shards together). Local.
  std::int64_t logical_parameter_count() const;
};

using ModelFactory =
    std::function<std::shared_ptr<Model>(ConfigSection& model_section, const ModelContext& ctx)>;

/// Builds the model named by model.name ("mlp", "cnn", "gpt", ...). Throws ConfigError for an
/// unknown name (listing the known ones) or bad sizes. Local, except that tensor-parallel models
/// may run collectives over ctx.tp while initialising.
std::shared_ptr<Model> build_model(ConfigSection& model_section, const ModelContext& ctx);

/// Names build_model knows. Local.
std::vector<std::string> model_names();

}  // namespace hpctrain::model
