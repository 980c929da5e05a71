#pragma once
// Megatron's conjugate pair of linear layers. A column-parallel layer splits its weight by output
// features: each rank computes its slice of the outputs from the whole input. A row-parallel
// layer splits its weight by input features: each rank multiplies its slice of the input, and the
// partial outputs are summed over the tp group. Chained column -> row (attention, MLP), the pair
// costs one all-reduce forward and one backward, and the activation between them stays sharded.
//
// Logical parameters (state_dict names relative to the layer):
//   ColumnParallelLinear  weight [out, in] split 0 (stacked P > 1: [P, out/P, in] split 1)
//                         bias   [out]     split 0 (stacked P > 1: [P, out/P]     split 1)
//   RowParallelLinear     weight [out, in] split 1;  bias [out] replicated (added after the
//                         all-reduce, so its gradient is the same on every tp rank)
// Weights start from N(0, init_std^2) drawn on the logical tensor (tensor_parallel_shard.hpp),
// biases at zero.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/parallel/tensor_parallel_shard.hpp"

namespace hpctrain::parallel {

/// Logical sizes and behaviour of a ColumnParallelLinear.
struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(std::int64_t in_features, std::int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(std::int64_t, in_features);
  /// Logical output features (all stacked blocks together).
  TORCH_ARG(std::int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  /// All-gather the output shards so every rank returns the full [.., out] output.
  TORCH_ARG(bool, gather_output) = false;
  /// P > 1 fuses P equal matrices (QKV: P = 3) and splits each of them across the ranks, so a
  /// rank holds the same slice (e.g. the same heads) of every block. Logical weight
  /// [P, out/P, in]; the local output is [block 0 slice, block 1 slice, ...].
  TORCH_ARG(std::int64_t, stacked) = 1;
  /// Allow out_features not divisible by tp: pad the local extent up to ceil(out/tp) with zero
  /// rows (vocabulary heads). Padded outputs are 0 and must be ignored by the consumer. Not with
  /// gather_output or stacked.
  TORCH_ARG(bool, pad_outputs) = false;
  TORCH_ARG(double, init_std) = 0.02;
};

/// Linear layer with the weight split by output features over the tp group.
class ColumnParallelLinear : public torch::nn::Module {
 public:
  /// `name` is the layer's full state_dict prefix ("blocks.0.attn.qkv"): it seeds the
  /// initialisation of "<name>.weight". Throws ConfigError naming `name` when the sizes do not
  /// divide by tp. Local.
  ColumnParallelLinear(const ColumnParallelLinearOptions& options, CommPtr tp,
                       const std::string& name, std::uint64_t seed);

  /// [.., in] -> [.., out / tp] (this rank's output slice), or [.., out] with gather_output.
  /// Collective over tp (backward all-reduce of the input gradient; forward all-gather with
  /// gather_output).
  torch::Tensor forward(const torch::Tensor& input);

  /// The logical shape and split of each parameter, by name relative to the layer. Local.
  std::vector<std::pair<std::string, TensorShard>> shards() const;
  /// Local output features (out / tp, or ceil(out / tp) with padding). Local.
  std::int64_t local_out_features() const { return local_out_; }
  const ColumnParallelLinearOptions& options() const { return options_; }

  torch::Tensor weight;  ///< local [out/tp, in] (stacked: [P, out/(P tp), in])
  torch::Tensor bias;    ///< local [out/tp] (stacked: [P, out/(P tp)]); undefined without bias

 private:
  ColumnParallelLinearOptions options_;
  CommPtr tp_;
  std::int64_t local_out_ = 0;
  TensorShard weight_shard_;
  TensorShard bias_shard_;
};

/// Logical sizes and behaviour of a RowParallelLinear.
struct RowParallelLinearOptions {
  RowParallelLinearOptions(std::int64_t in_features, std::int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(std::int64_t, in_features);
  TORCH_ARG(std::int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  /// The input is already this rank's slice [.., in / tp] (the output of a ColumnParallelLinear
  /// without gather); false: the layer takes the full input and keeps its slice.
  TORCH_ARG(bool, input_is_parallel) = true;
  TORCH_ARG(double, init_std) = 0.02;
};

/// Linear layer with the weight split by input features over the tp group; the output is
/// all-reduced, then the (replicated) bias is added.
class RowParallelLinear : public torch::nn::Module {
 public:
  /// As ColumnParallelLinear's constructor; in_features must divide by tp. Local.
  RowParallelLinear(const RowParallelLinearOptions& options, CommPtr tp, const std::string& name,
                    std::uint64_t seed);

  /// [.., in / tp] (or [.., in] without input_is_parallel) -> [.., out], the same on every tp
  /// rank. Collective over tp (forward all-reduce; backward all-gather without
  /// input_is_parallel).
  torch::Tensor forward(const torch::Tensor& input);

  /// The logical shape and split of each parameter, by name relative to the layer. Local.
  std::vector<std::pair<std::string, TensorShard>> shards() const;
  const RowParallelLinearOptions& options() const { return options_; }

  torch::Tensor weight;  ///< local [out, in/tp]
  torch::Tensor bias;    ///< [out], replicated; undefined without bias

 private:
  RowParallelLinearOptions options_;
  CommPtr tp_;
  TensorShard weight_shard_;
  TensorShard bias_shard_;
};

}  // namespace hpctrain::parallel
