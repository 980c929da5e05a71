#pragma once
// The data-parallel strategy of a run, chosen once at start from parallel.shard (docs/MEMORY.md):
// replicated (`none`), optimizer state divided (`optimizer`, ZeRO-1), gradients divided too
// (`gradients`, ZeRO-2), parameters divided too (`full`, ZeRO-3 / FSDP).
//
// It owns everything that depends on that choice: where parameters and gradients live, the
// gradient synchronisation during backward and its completion, this rank's share of the gradient
// norm, what the optimizer updates, the parameter gathers (after the update, or around each
// unit's forward and backward), when the parameters are readable, and the logical tensors of a
// checkpoint. The step, evaluation and checkpoint code call this interface and never ask which
// strategy it is.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/parallel/parameter_units.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::parallel {

class GradientSynchronizer;

/// What the optimizer updates: float32 parameters (the live ones, or the owned master chunks
/// under `full`) and their gradients, 1-D and of equal length.
struct OptimizerSegment {
  torch::Tensor params;
  torch::Tensor grads;
};

/// A parameter in the strategy's layout (the tensor a checkpoint's optimizer records are views
/// of): its state_dict name, its (tensor-parallel) shape, and where it lies.
struct LayoutEntry {
  std::string name;
  torch::Tensor param;  ///< the model's parameter object
  std::int64_t offset = 0;
  std::int64_t numel = 0;
};

/// Communication of one optimizer step, as this rank issues it (bytes of the tensors handed to
/// the collectives). For the ledger.
struct StrategyTraffic {
  std::int64_t all_reduce_bytes = 0;
  std::int64_t reduce_scatter_bytes = 0;
  std::int64_t all_gather_bytes = 0;
  std::int64_t collectives = 0;
};

/// What a strategy is built from: the model as the parallel layer sees it, and the groups.
struct StrategyInputs {
  StrategyInputs(torch::nn::Module& m, std::string name) : module(m), model_name(std::move(name)) {}
  torch::nn::Module& module;  ///< the model (its parameters move into the strategy's storage)
  std::string model_name;     ///< for messages
  /// The model's units (model::Model::parameter_units), for `full`.
  std::vector<std::vector<std::string>> units;
  /// Parameters replicated across the tp group (their gradients are averaged over it, and the
  /// norm counts them once). Ignored at tp = 1.
  std::vector<std::string> tp_replicated;
  /// Whether forward waits for each layer's parameters (model::Model::waits_for_parameters),
  /// and how to install that wait (model::Model::set_parameter_wait; called with an empty
  /// function when the strategy goes).
  bool waits_for_parameters = false;
  std::function<void(std::function<void(const torch::Tensor&)>)> set_parameter_wait;
  /// Installs the unit hooks forward calls (model::Model::set_unit_hooks; null removes them).
  std::function<void(ParameterUnitHooks*)> set_unit_hooks;
  ParallelConfig config;
  std::int64_t bucket_bytes = 0;
  bool overlap = true;
  std::shared_ptr<comm::Communicator> dp;  ///< the data-parallel group
  /// Hybrid sharding (parallel.shard_group): the group the state is divided over (the dp group
  /// unless hybrid), the group across shard groups (null unless hybrid) and host sums over the
  /// shard group. Null `shard`: the dp group.
  std::shared_ptr<comm::Communicator> shard;
  std::shared_ptr<comm::Communicator> replica;
  std::shared_ptr<comm::ControlPlane> shard_control;
  std::shared_ptr<comm::Communicator> tp;  ///< the tensor-parallel group
  std::shared_ptr<comm::ControlPlane> dp_control;
  /// Parameters two pipeline stages hold (model::StageCopy), paired with the pp rank holding
  /// the other copy; with `pp` (null at pp = 1).
  std::vector<std::pair<std::string, int>> stage_copies;
  std::vector<std::string> secondary_copies;  ///< of those, the ones another stage saves
  std::shared_ptr<comm::Communicator> pp;
};

class DataParallelStrategy {
 public:
  virtual ~DataParallelStrategy() = default;
  /// Which strategy this is. Local.
  virtual ShardMode mode() const = 0;

  // --- one step -------------------------------------------------------------------------------
  /// Before each micro-batch's forward (`first`: the step's first). Collective over the dp group
  /// where it gathers parameters (`full`); local otherwise.
  virtual void before_forward(bool first) { (void)first; }
  /// Before each micro-batch's backward; `last`: the step's last micro-batch. Local.
  virtual void before_backward(bool last) = 0;
  /// After each micro-batch's backward. Collective over the dp group where gradients are
  /// reduce-scattered per micro-batch (`gradients`, `full`); returns the seconds it waited.
  virtual double after_backward() { return 0.0; }
  /// After the step's last backward: completes every gradient reduction and averages the
  /// gradients replicated across tp (and adds up those of parameters two pipeline stages hold),
  /// so the gradients the update reads are final. Returns the seconds spent waiting. Collective
  /// over the dp and tp groups (and the pp pairs of stage copies).
  virtual double finish_gradients() = 0;
  /// This rank's part of the squared global gradient norm: the squares of the gradient elements
  /// the update reads, tp-replicated parameters counted 1/tp times, a parameter another stage
  /// saves not counted; summed over the dp group where the gradients are divided. The caller sums
  /// it over tp and pp. Collective over the dp group when sharded; local otherwise.
  virtual double grad_square_sum() = 0;
  /// Multiplies the gradients the update reads by `factor`. Local.
  virtual void scale_grads(double factor) = 0;
  /// Zeroes the gradients (after the update or a skipped step). Local.
  virtual void zero_grads() = 0;
  /// What this rank's optimizer updates; valid for the strategy's life. Local.
  virtual std::vector<OptimizerSegment> segments() = 0;
  /// Before the optimizer update: completes gathers that read what the update writes. Local.
  virtual void before_update() {}
  /// After the update: starts the parameter gather where the parameters stay replicated after a
  /// sharded update (`optimizer`, `gradients`). Collective over the dp group.
  virtual void after_update() {}
  /// Makes the model's parameters readable in full by anything but the training forward
  /// (evaluation, a save, the end of the run): waits for gathers in flight, or (`full`) gathers
  /// every unit until the next training forward. Collective over the dp group for `full`; local
  /// otherwise.
  virtual void parameters_ready() = 0;
  /// After something wrote the model's parameters (a checkpoint load, model.init_from) while
  /// they were readable: takes this rank's part back into its owned storage (`full`). Local.
  virtual void parameters_written() {}
  /// The gradient synchronizer the pipeline schedule drives per model chunk (`none`,
  /// `optimizer`); null for the strategies the pipeline does not run with. Local.
  virtual GradientSynchronizer* synchronizer() { return nullptr; }

  // --- checkpoints: logical tensors -------------------------------------------------------------
  /// Every parameter in the layout the optimizer state is saved from, in save order. Local.
  virtual const std::vector<LayoutEntry>& layout() const = 0;
  /// The parameters as one float32 tensor in the layout, where the model's own are not the
  /// master copy (`full`: the owned chunks gathered, a new tensor a save may keep); undefined
  /// where they are (read the model's parameters). Collective over the dp group for `full`.
  virtual torch::Tensor master_parameters() { return {}; }
  /// The layout tensor a checkpoint load writes the parameters into (`full`: new zeros), or
  /// undefined where the load writes into the model's parameters. Local.
  virtual torch::Tensor parameter_load_target() { return {}; }
  /// Takes this rank's part of the loaded parameter_load_target() into its storage. Local.
  virtual void restore_parameters(const torch::Tensor& loaded) { (void)loaded; }
  /// Optimizer state `packed` (laid out like the concatenated segments()) as a tensor in the
  /// layout: `packed` itself when the segments cover the layout, else every rank's chunks
  /// gathered into a new tensor. Collective over the dp group when sharded; local otherwise.
  virtual torch::Tensor gather_state(const torch::Tensor& packed) = 0;
  /// The layout tensor a checkpoint load writes optimizer state `packed` into: `packed` itself,
  /// or new zeros for restore_state. Local.
  virtual torch::Tensor state_load_target(const torch::Tensor& packed) = 0;
  /// Copies this rank's part of a loaded layout tensor into `packed` (nothing when they are one
  /// tensor). Local.
  virtual void restore_state(const torch::Tensor& loaded, torch::Tensor& packed) = 0;

  // --- accounting -------------------------------------------------------------------------------
  /// Bytes this rank keeps for parameters and for gradients between steps (padding included;
  /// gathered units and buffers in flight excluded). Local.
  virtual std::int64_t parameter_bytes() const = 0;
  virtual std::int64_t gradient_bytes() const = 0;
  /// The communication of one optimizer step of `micro_batches` micro-batches. Local.
  virtual StrategyTraffic traffic_per_step(int micro_batches) const = 0;
  /// Communication slices the trace shows per step. Local.
  virtual std::int64_t trace_slices_per_step(int micro_batches) const = 0;
};

/// The strategy of `inputs.config.shard`. Moves the model's parameters into its storage and makes
/// every dp rank start from dp rank 0's parameters and buffers. Throws ConfigError when `full`
/// cannot use the model (a unit naming a parameter the model lacks, or in two units). Collective
/// over the dp group.
std::unique_ptr<DataParallelStrategy> make_strategy(StrategyInputs inputs);

/// The packed pieces of `ranges` (each {offset, numel} in a layout, packed one after another in
/// that order) that overlap layout range [offset, offset + numel): {packed offset, numel} pairs.
/// Local.
std::vector<std::pair<std::int64_t, std::int64_t>> packed_overlap(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges, std::int64_t offset,
    std::int64_t numel);

/// Sum of squares of a float tensor in double, over fixed chunks (the result does not depend on
/// the thread count). Local.
double square_sum(const torch::Tensor& t);

}  // namespace hpctrain::parallel
