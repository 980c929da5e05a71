#pragma once
// Units of full sharding (parallel.shard: full, ZeRO-3 / FSDP): groups of parameters that are
// gathered together just before their forward and freed together after it (a gpt block, an
// mlp or cnn layer). LibTorch's C++ modules have no forward hooks, so a model names its units
// (model::Model::parameter_units) and its forward calls enter and leave around each
// (model::Model::enter_unit, leave_unit), which reach the strategy through ParameterUnitHooks.

#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hpctrain::parallel {

/// Where a unit lies: its members' offsets in the unit's buffer (in the order given), its length
/// padded to a multiple of the shard count, and the chunk each shard rank owns.
struct UnitSpan {
  std::vector<std::int64_t> offsets;  ///< of each member, in the unit's buffer
  std::int64_t numel = 0;             ///< padded: a multiple of the shard count, at least one each
  std::int64_t chunk = 0;             ///< numel / shard count
  /// First element of shard rank `rank`'s chunk in the unit's buffer. Local.
  std::int64_t owned_offset(int rank) const { return rank * chunk; }
};

/// Lays out units whose members have `numels` (one list per unit) for `shard_count` ranks:
/// members back to back, each unit padded at its end to a multiple of shard_count elements (at
/// least shard_count, so every rank owns at least one). Local.
std::vector<UnitSpan> layout_units(const std::vector<std::vector<std::int64_t>>& numels,
                                   int shard_count);

/// What a model's forward calls around each of its units (installed by the full-sharding
/// strategy; absent otherwise, when enter and leave return their argument).
class ParameterUnitHooks {
 public:
  virtual ~ParameterUnitHooks() = default;
  /// Just before unit `unit`'s forward reads its parameters: gathers them (or waits for the
  /// prefetch) and starts gathering the next unit; returns `input`, cast to the gathered
  /// parameters' dtype when that differs and it is floating point. Collective over the dp group
  /// (every rank enters the same units in the same order).
  virtual torch::Tensor enter(std::size_t unit, const torch::Tensor& input) = 0;
  /// Just after unit `unit`'s forward: frees the gathered parameters (parallel.
  /// reshard_after_forward, and always without autograd) and returns `output`, routed (with
  /// autograd) through an identity whose backward gathers the unit again before its backward.
  /// Local but for a gather it may start.
  virtual torch::Tensor leave(std::size_t unit, const torch::Tensor& output) = 0;
};

}  // namespace hpctrain::parallel
