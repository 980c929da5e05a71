#pragma once
// Activation recomputation (model.recompute): a function of some tensors runs forward without
// keeping its intermediate activations; backward runs it again, with the random-number state it
// had the first time (so dropout draws the same masks) and the same autocast state, and
// back-propagates through the recomputed graph. Gradients equal those without recomputation;
// the price is one more forward of the function in backward.

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace hpctrain::model {

/// What the GPT recomputes in backward (model.recompute).
enum class Recompute {
  kNone,       ///< keep every activation
  kBlock,      ///< keep each block's input only, recompute the block
  kAttention,  ///< recompute the attention scores, softmax and dropout (T x T per head)
};

/// The recomputed function: inputs -> one output. It may use parameters of modules (their
/// gradients accumulate in backward) and run collectives (backward runs them again in the same
/// order on every rank).
using RecomputedFn = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

/// fn(inputs), keeping only `inputs` (and the RNG state) for backward when grad mode is on and an
/// input requires grad; otherwise simply fn(inputs). Local (collective as fn is).
torch::Tensor recompute(const RecomputedFn& fn, const std::vector<torch::Tensor>& inputs);

}  // namespace hpctrain::model
