#pragma once
// Everything that reconciles gradients after the last backward of a step and before the gradient
// norm and the optimizer update, in one place and in one order:
//   1. wait for the data-parallel bucket all-reduces launched during backward (and launch those
//      backward did not: unused parameters, overlap off), so every dp rank holds the average;
//   2. average the gradients of parameters replicated across the tensor-parallel group (norms,
//      biases of row-parallel layers, position embeddings): they are mathematically identical on
//      every tp rank, and averaging keeps the replicas bit-identical even when the ranks'
//      reductions round differently;
//   3. with pipeline stages, add up the gradients of a parameter two stages hold (the tied token
//      embedding of the first and the last stage, model::StageCopy): each stage sends its copy's
//      gradient to the other over the pp group and adds the one it receives, so both copies take
//      the same update (a + b and b + a round alike), as Megatron-LM sums its embedding group.
// Sharded parameters need nothing more: each tp rank owns a disjoint piece of the logical gradient.

#include <torch/torch.h>

#include <memory>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"

namespace hpctrain::parallel {

class GradientFinalizer {
 public:
  /// `replicated`: the parameters whose gradients are replicated across `tp` (ignored when tp has
  /// one rank). Local.
  GradientFinalizer(GradientSynchronizer& dp_sync, std::shared_ptr<comm::Communicator> tp,
                    std::vector<torch::Tensor> replicated);
  /// Step 3: `copies` are (parameter, pp rank holding its other copy), in the same order on both
  /// ranks of each pair. With a sharded optimizer each copy must have a gradient bucket of its
  /// own (FlatLayout::own_bucket), so both stages own the same elements of it. Local.
  void set_stage_copies(std::shared_ptr<comm::Communicator> pp,
                        std::vector<std::pair<torch::Tensor, int>> copies);
  /// Steps 1 to 3 above; returns the seconds spent waiting for the dp buckets. Collective over
  /// the dp and tp groups (and the pairs of pp ranks holding stage copies).
  double finalize();

 private:
  GradientSynchronizer& dp_sync_;
  std::shared_ptr<comm::Communicator> tp_;
  std::vector<torch::Tensor> replicated_;
  std::shared_ptr<comm::Communicator> pp_;
  std::vector<std::pair<torch::Tensor, int>> copies_;
};

}  // namespace hpctrain::parallel
