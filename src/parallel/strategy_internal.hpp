#pragma once
// What the data-parallel strategies share, private to the parallel layer: the hook that tells a
// strategy a parameter's gradient is final, and the two strategy families make_strategy picks.

#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "hpctrain/parallel/data_parallel_strategy.hpp"

namespace hpctrain::parallel {

/// Runs `ready(index)` after AccumulateGrad has added a backward's contribution into parameter
/// `index`'s gradient. Local.
class GradientReadyHooks {
 public:
  GradientReadyHooks() = default;
  GradientReadyHooks(const GradientReadyHooks&) = delete;
  GradientReadyHooks& operator=(const GradientReadyHooks&) = delete;
  ~GradientReadyHooks();
  /// Installs the hook on every tensor of `params` (leaves that require grad). Local.
  void install(const std::vector<torch::Tensor>& params, std::function<void(std::size_t)> ready);

 private:
  std::unique_ptr<std::function<void(std::size_t)>> ready_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  std::vector<std::uintptr_t> keys_;
};

/// Reduce-scatters (averages) of gradient buffers over a group into this rank's owned float32
/// chunks, at most two in flight: the gradient memory of the sharded strategies stays their
/// owned chunks plus these.
class OwnedGradientReductions {
 public:
  OwnedGradientReductions(std::shared_ptr<comm::Communicator> group, torch::Tensor owned)
      : group_(std::move(group)), owned_(std::move(owned)) {}
  /// Starts averaging `buffer` (whose numel divides by the group size) over the group; when it
  /// completes, the rank's chunk of it (`chunk` elements) is added into owned[packed_offset...].
  /// Waits for the oldest while more than two are in flight. Collective over the group.
  void launch(torch::Tensor buffer, std::int64_t packed_offset, std::int64_t chunk);
  /// Completes every reduction in flight. Local (completes collectives already started).
  void drain();
  /// Waits for every reduction in flight without adding, for a destructor. Local.
  void abandon() noexcept;

 private:
  struct InFlight {
    torch::Tensor buffer;
    comm::WorkHandle work;
    std::int64_t packed_offset;
    std::int64_t chunk;
  };
  void retire();

  std::shared_ptr<comm::Communicator> group_;
  torch::Tensor owned_;
  std::deque<InFlight> in_flight_;
};

/// `none`, `optimizer` and `gradients`: every rank holds all parameters in one flat buffer.
std::unique_ptr<DataParallelStrategy> make_flat_strategy(StrategyInputs inputs);
/// `full`: every rank holds its chunks of each unit's parameters.
std::unique_ptr<DataParallelStrategy> make_fully_sharded_strategy(StrategyInputs inputs);

/// Averages over `tp` the pieces of `packed` listed as {offset, numel} (the owned parts of
/// parameters replicated across tp, at the same places on every tp rank). Collective over tp.
void average_packed_pieces(torch::Tensor& packed,
                           const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces,
                           comm::Communicator& tp);

/// `sq` (the squares of `packed`) with its pieces of tp-replicated parameters ({offset, numel})
/// counted 1/tp times instead of once; a sum the corrections round below zero is zero, NaN stays
/// NaN. Local.
double count_replicated_once(double sq, const torch::Tensor& packed,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces,
                             int tp);

/// Averages `tensors` over `replica` (the replica groups of hybrid sharding; nothing when null)
/// with one collective. Collective over `replica`.
void average_over_replicas(const std::vector<torch::Tensor>& tensors,
                           const std::shared_ptr<comm::Communicator>& replica);

}  // namespace hpctrain::parallel
