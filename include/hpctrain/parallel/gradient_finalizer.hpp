#pragma once
// Everything that reconciles gradients after the last backward of a step and before the gradient
// norm and the optimizer update, in one place and in one order:
//   1. wait for the data-parallel bucket all-reduces launched during backward (and launch those
//      backward did not: unused parameters, overlap off), so every dp rank holds the average;
//   2. average the gradients of parameters replicated across the tensor-parallel group (norms,
//      biases of row-parallel layers, position embeddings): they are mathematically identical on
//      every tp rank, and averaging keeps the replicas bit-identical even when the ranks'
//      reductions round differently.
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
  /// Steps 1 and 2 above; returns the seconds spent waiting for the dp buckets. Collective over
  /// the dp and tp groups.
  double finalize();

 private:
  GradientSynchronizer& dp_sync_;
  std::shared_ptr<comm::Communicator> tp_;
  std::vector<torch::Tensor> replicated_;
};

}  // namespace hpctrain::parallel
