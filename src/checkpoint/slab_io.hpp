#pragma once
// Private: moving one rank's slab of a logical tensor between memory and a contiguous dataset in
// a file, with pwrite/pread at the dataset's offset. The slab follows the tensor-parallel
// sharding rule (tensor_parallel_shard.hpp): tp rank r holds [r*c, min((r+1)*c, L)) along the
// split dimension, c = local extent; rows past L are padding, never written, zeroed on load.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::checkpoint::slab {

/// Where a rank's slab lies in the logical tensor. Local value type.
struct Geometry {
  int split_dim = -1;        ///< -1: the whole tensor
  std::int64_t logical = 1;  ///< L: logical extent along split_dim
  std::int64_t local = 1;    ///< c: local extent along split_dim
  std::int64_t begin = 0;    ///< first logical row this rank holds
  std::int64_t end = 0;      ///< one past the last (begin == end: padding only)
  std::int64_t outer = 1;    ///< product of the dimensions before split_dim
  std::int64_t inner = 1;    ///< product of the dimensions after split_dim
  std::int64_t element_size = 1;
  /// Whether this rank has anything to write or read.
  bool empty() const { return end <= begin; }
};

/// The slab of tp rank `tp_rank` whose local extent along `split_dim` is `local_extent`. Local.
Geometry geometry(const std::vector<std::int64_t>& logical_shape, int split_dim,
                  std::int64_t local_extent, int tp_rank, std::int64_t element_size);

/// Writes the slab of `local` (contiguous CPU, local shape) into the dataset at `offset` of the
/// open file `fd`. Adjacent runs are merged, so a split along dim 0 is one pwrite. Local.
void write_slab(int fd, const std::string& path, std::uint64_t offset, const torch::Tensor& local,
                const Geometry& g);
/// Reads the slab from the dataset at `offset` into `out` (contiguous CPU, local shape, the
/// saved dtype) and zeroes its padding rows. Local.
void read_slab(int fd, const std::string& path, std::uint64_t offset, torch::Tensor& out,
               const Geometry& g);

/// "(256, 784)": a shape as numpy prints it. Local.
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace hpctrain::checkpoint::slab
