#pragma once
// The model interface every model in the zoo implements, and the registry that builds one by
// name from the config's model section. Parameter names follow PyTorch's state_dict naming
// ("fc1.weight", "blocks.0.attn.qkv.weight") so checkpoints are readable by other tools.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/parallel/parameter_units.hpp"
#include "hpctrain/runtime/task.hpp"

namespace hpctrain {
class ConfigSection;
namespace comm {
class Communicator;
}
}  // namespace hpctrain

namespace hpctrain::model {

class QuantizedLinear;

/// This rank's part of a pipeline (parallel.pp > 1, docs/PIPELINE.md): the model is cut into
/// stages() = pp x virtual_stages consecutive stages, and this rank (pp rank `rank`) builds its
/// chunks: chunk c is stage c x pp + rank. The default is the whole model on one stage.
struct PipelinePart {
  int pp = 1;
  int virtual_stages = 1;
  int rank = 0;
  std::vector<int> layers;  ///< parallel.pp_layers: blocks per stage (empty: as even as possible)
  int stages() const { return pp * virtual_stages; }
  /// The model stage of this rank's chunk `chunk`. Local.
  int stage_of_chunk(int chunk) const { return chunk * pp + rank; }
  /// Whether the model is cut at all. Local.
  bool cut() const { return stages() > 1; }
};

/// Where the model is built: its tensor-parallel group, its pipeline part and the seed its
/// initialisation draws from.
struct ModelContext {
  std::shared_ptr<comm::Communicator> tp;  ///< tensor-parallel group (size 1 when tp is off)
  int tp_rank = 0;
  int tp_size = 1;
  std::uint64_t seed = 0;
  PipelinePart pipeline;  ///< the whole model unless parallel.pp > 1
};

/// A parameter that more than one pipeline stage holds (the token embedding of a gpt with tied
/// embeddings: the first stage embeds with it, the last computes the logits with it). Each copy's
/// gradient is summed with the other's after backward, so both take the same update.
struct StageCopy {
  std::string name;     ///< state_dict name, the same on both stages ("wte.weight")
  int other_stage = 0;  ///< the model stage holding the other copy
  /// The copy checkpoints save and the gradient norm counts (the other is loaded, not saved).
  bool primary = true;
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
  std::int64_t count = 0;    ///< samples (classification), tokens (language modelling) or
                             ///< target elements (regression)
  double abs_error_sum = 0;  ///< regression: sum of |prediction - target| (mean absolute error)
  /// On a GPU the built-in losses leave the three sums on the device: [loss_sum, correct,
  /// abs_error_sum] as float64, with the fields above 0 until resolve(). Reading them at once
  /// would make the host wait for the forward pass before it could queue backward; the trainer
  /// reads them after the gradient norm, where it waits anyway. Undefined on CPU and for models
  /// that fill the fields themselves (set_metric_sums in task_loss.hpp does either).
  torch::Tensor pending;
  /// Adds `pending` into the fields above and clears it (one wait for the device). Local.
  void resolve();
};

class Model : public torch::nn::Module {
 public:
  /// Model outputs for a batch of inputs (logits; for vocabulary-parallel models, this rank's
  /// shard of them). Collective over the tp group when tp > 1.
  virtual torch::Tensor forward(const torch::Tensor& inputs) = 0;
  /// Loss and metric sums of `outputs` against `targets`. Collective over the tp group when tp > 1.
  virtual LossOutput loss(const torch::Tensor& outputs, const torch::Tensor& targets) = 0;
  /// What the model learns: its loss, metrics and the data it fits. Local.
  virtual Task task() const = 0;
  /// Forward FLOPs for one sample (a multiply-add counts 2), counted from the layers; the whole
  /// logical model, not this rank's shard. Local.
  virtual double forward_flops_per_sample() const = 0;
  /// Where forward_flops_per_sample comes from, for the ledger ("counted from the layers",
  /// "profiler", "model.flops_per_sample"). Local.
  virtual std::string flops_source() const { return "counted from the layers"; }
  /// Checks that a batch of the data fits the model before training or evaluation starts:
  /// `inputs` and `targets` are one batch (a sample or a few) of the file named by `where`, with
  /// `num_classes` classes (classification). Throws ConfigError naming the shapes seen when it
  /// does not. Built-in models check their sizes when they are built (default: nothing). Local.
  virtual void check_batch(const torch::Tensor& inputs, const torch::Tensor& targets,
                           std::int64_t num_classes, const std::string& where) {}
  /// How parameter `name` is sharded (default: replicated, logical shape = local shape). Local.
  virtual ShardInfo shard_info(const std::string& name) const;
  /// Parameters of the logical model (all shards together; with pipeline stages, this rank's
  /// stages). Local.
  std::int64_t logical_parameter_count() const;

  /// Pipeline stages (docs/PIPELINE.md). Model chunks this rank holds: 0 for a model that cannot
  /// be cut into stages (build_model refuses it with parallel.pp > 1), else the number of chunks
  /// its ModelContext::pipeline gave it (1 for the whole model). Local.
  virtual int pipeline_chunks() const { return 0; }
  /// Forward of this rank's chunk `chunk`: `input` is the batch's inputs on the model's first
  /// stage and the previous stage's output otherwise; returns the next stage's input, or on the
  /// last stage what forward() returns (loss() takes it). Collective over the tp group.
  virtual torch::Tensor forward_chunk(int chunk, const torch::Tensor& input);
  /// The shape of what one stage passes to the next for a batch of `inputs` (the activations,
  /// and backward their gradients; float32 on the model's device). Local.
  virtual std::vector<std::int64_t> stage_activation_shape(const torch::Tensor& inputs) const;
  /// Parameters this rank holds that another stage holds as well (see StageCopy). Local.
  virtual std::vector<StageCopy> stage_copies() const { return {}; }

  /// Runs the torch::nn::Linear submodule `layer` through `q` (int8 weights, dynamic int8
  /// activations; model/quantized_linear.hpp) from now on, in forward passes of models that call
  /// their linear layers through linear() or int8_linear() (the built-in mlp, cnn and gpt). Local.
  void set_int8_linear(const torch::nn::Module* layer, std::shared_ptr<QuantizedLinear> q);
  /// Back to the float32 layers. Local.
  void clear_int8_linears() { int8_.clear(); }
  /// Linear layers running in int8. Local.
  std::size_t int8_linear_count() const { return int8_.size(); }
  /// Waits for a parameter before forward reads it: the sharded optimizer's all-gather of the
  /// previous step's update may still be running (parallel.shard_optimizer with
  /// parallel.overlap; docs/MEMORY.md). Called with each parameter of a group (a layer, a block)
  /// just before the group's first use.
  using ParameterWait = std::function<void(const torch::Tensor& parameter)>;
  /// Whether forward waits for its parameters group by group through wait_for_parameters() (the
  /// built-in mlp, cnn and gpt do). When false the trainer lets the whole gather finish before
  /// forward. A model that returns true must pass every parameter it reads. Local.
  virtual bool waits_for_parameters() const { return false; }
  /// Installs (or, with an empty function, removes) the wait. Local.
  void set_parameter_wait(ParameterWait wait) { parameter_wait_ = std::move(wait); }
  /// Units of full sharding (parallel.shard: full): the state_dict names of the parameters of
  /// each group forward reads together (a gpt block, an mlp layer), in forward order. Parameters
  /// in no unit form the root, gathered for the whole step. Empty (the default): the whole model
  /// is the root, correct but without memory saved. A model that returns units calls
  /// enter_unit and leave_unit around each in forward. Local.
  virtual std::vector<std::vector<std::string>> parameter_units() const { return {}; }
  /// Installs (or, with null, removes) the hooks forward calls around each unit. Local.
  void set_unit_hooks(parallel::ParameterUnitHooks* hooks) { unit_hooks_ = hooks; }
  /// The int8 replacement of linear layer `layer` (any module: torch::nn::Linear or the
  /// tensor-parallel linears of the gpt at tp = 1), or null when it runs in float32. Local.
  const QuantizedLinear* int8_linear(const torch::nn::Module* layer) const;

 protected:
  /// `layer`'s output for `x`: its int8 replacement when one is set, else layer.forward(x).
  /// Local.
  torch::Tensor linear(torch::nn::LinearImpl& layer, const torch::Tensor& x);
  /// Runs the installed parameter wait, if any, on every parameter of `module` (recursively).
  /// Local (the wait itself may block on a collective already in flight).
  void wait_for_parameters(const torch::nn::Module& module) const;
  /// parameter_units() of `modules` (each a unit, in forward order): their parameters' names.
  /// Local.
  std::vector<std::vector<std::string>> units_of(
      const std::vector<const torch::nn::Module*>& modules) const;
  /// Before unit `unit`'s forward (parameter_units order): `input` as the unit takes it. May
  /// gather the unit's parameters (collective over the dp group under parallel.shard: full).
  torch::Tensor enter_unit(std::size_t unit, const torch::Tensor& input) {
    return unit_hooks_ ? unit_hooks_->enter(unit, input) : input;
  }
  /// After unit `unit`'s forward: `output` as the model continues with it. Local.
  torch::Tensor leave_unit(std::size_t unit, const torch::Tensor& output) {
    return unit_hooks_ ? unit_hooks_->leave(unit, output) : output;
  }

 private:
  std::map<const torch::nn::Module*, std::shared_ptr<QuantizedLinear>> int8_;
  ParameterWait parameter_wait_;
  parallel::ParameterUnitHooks* unit_hooks_ = nullptr;
};

using ModelFactory =
    std::function<std::shared_ptr<Model>(ConfigSection& model_section, const ModelContext& ctx)>;

/// Builds the model named by model.name ("mlp", "cnn", "gpt", ...). Throws ConfigError for an
/// unknown name (listing the known ones), bad sizes, or pipeline stages (ctx.pipeline.cut()) of
/// a model that cannot be cut into them (pipeline_chunks() == 0). Local, except that
/// tensor-parallel models may run collectives over ctx.tp while initialising.
std::shared_ptr<Model> build_model(ConfigSection& model_section, const ModelContext& ctx);

/// Names build_model knows. Local.
std::vector<std::string> model_names();

/// Adds model family `name` to the registry build_model uses (a C++ model from outside the
/// tree: see HPCTRAIN_REGISTER_MODEL and docs/MODELS.md). Throws Error when the name is taken.
/// Local; every rank registers the same models (every rank loads the same plugins).
void register_model(const std::string& name, ModelFactory factory);

/// Loads the shared library at `path` (a plugin of models built against the installed hpctrain
/// package), whose HPCTRAIN_REGISTER_MODEL objects register its models as it loads. Loading
/// the same file again does nothing. `key` names the option or config key in messages
/// ("--plugin", "model.plugin"). Throws ConfigError for a missing file, a library that does
/// not load (dlerror's reason) or one that registers nothing. Local.
void load_plugin(const std::string& path, const std::string& key);

}  // namespace hpctrain::model

/// Registers `factory` (a ModelFactory: std::shared_ptr<Model>(ConfigSection&, const
/// ModelContext&)) as model.name `name` when the program or plugin holding this line is loaded.
/// Put it at namespace scope in one .cpp file of the model.
#define HPCTRAIN_REGISTER_MODEL(name, factory)                                         \
  static const bool HPCTRAIN_MODEL_CONCAT(hpctrain_model_registered_, __LINE__) = [] { \
    ::hpctrain::model::register_model(name, factory);                                  \
    return true;                                                                       \
  }()
#define HPCTRAIN_MODEL_CONCAT_(a, b) a##b
#define HPCTRAIN_MODEL_CONCAT(a, b) HPCTRAIN_MODEL_CONCAT_(a, b)

namespace hpctrain::model {}  // namespace hpctrain::model
