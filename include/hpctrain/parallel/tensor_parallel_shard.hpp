#pragma once
// How a tensor-parallel parameter relates to its logical (unsharded) tensor, and the
// initialisation that makes the logical weights independent of tp.
//
// Sharding rule: a parameter with split_dim d >= 0 holds, on tp rank r, the slab
// [r * c, min((r + 1) * c, L)) of the logical tensor along d, where L is the logical extent and
// c = ceil(L / tp) is the local extent (the local tensor's size along d). When L divides by tp
// this is the plain hyperslab [r * L/tp, (r + 1) * L/tp). Otherwise (only the vocabulary of the
// GPT embedding and output head is allowed to be padded) the local rows past L are padding: they
// exist only in memory, start at zero, receive zero gradients, are never written to a
// checkpoint, and are set to zero when one is loaded.
//
// Initialisation: every parameter's full logical tensor is drawn from its own CPU generator,
// seeded from (model seed, parameter name), and each rank keeps its slab. So the logical weights
// depend on neither tp nor the order in which modules are built.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/parallel/tensor_parallel_ops.hpp"

namespace hpctrain::parallel {

/// A parameter's logical shape and the dimension split across the tp ranks (-1: replicated).
struct TensorShard {
  std::vector<std::int64_t> logical_shape;
  int split_dim = -1;
};

/// ceil(logical_extent / tp_size): the local extent of a split dimension. Local.
std::int64_t shard_extent(std::int64_t logical_extent, int tp_size);

/// The logical range [begin, end) along the split dimension that tp rank `tp_rank` holds, given
/// the local extent (see the sharding rule above); empty when the rank holds only padding. Local.
std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t logical_extent,
                                                  std::int64_t local_extent, int tp_rank);

/// The local shape of `shard` on a tp group of `tp_size` ranks. Local.
std::vector<std::int64_t> local_shape(const TensorShard& shard, int tp_size);

/// This rank's slab of the logical tensor `logical` (a new contiguous tensor, zero-padded past
/// the logical extent). Local.
torch::Tensor shard_of(const torch::Tensor& logical, const TensorShard& shard, int tp_rank,
                       int tp_size);

/// The logical tensor reassembled from every rank's `local` slab (padding dropped). Collective
/// over tp (all-gather); returns `local` itself for a replicated shard or tp = 1.
torch::Tensor gather_logical(const torch::Tensor& local, const TensorShard& shard,
                             const CommPtr& tp);

/// The generator seed of parameter `name` (its state_dict name) under model seed `seed`: a hash
/// of both, folded to the 32 bits the CPU generator's Mersenne twister uses. Local.
std::uint64_t parameter_seed(std::uint64_t seed, const std::string& name);

/// Draws the full logical tensor of `shard` from N(0, std^2) in float32 with the generator of
/// parameter_seed(seed, name), and returns this rank's slab of it (zero-padded). Local.
torch::Tensor init_normal_shard(std::uint64_t seed, const std::string& name,
                                const TensorShard& shard, double std, int tp_rank, int tp_size);

}  // namespace hpctrain::parallel
