#include "hpctrain/parallel/tensor_parallel_shard.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

void check_split_dim(const TensorShard& shard) {
  if (shard.split_dim >= static_cast<int>(shard.logical_shape.size())) {
    throw Error(str("tensor shard: split_dim ", shard.split_dim, " outside a tensor of ",
                    shard.logical_shape.size(), " dimensions"));
  }
}

}  // namespace

std::int64_t shard_extent(std::int64_t logical_extent, int tp_size) {
  return (logical_extent + tp_size - 1) / tp_size;
}

std::pair<std::int64_t, std::int64_t> shard_range(std::int64_t logical_extent,
                                                  std::int64_t local_extent, int tp_rank) {
  const std::int64_t begin = std::min(logical_extent, tp_rank * local_extent);
  const std::int64_t end = std::min(logical_extent, (tp_rank + 1) * local_extent);
  return {begin, end};
}

std::vector<std::int64_t> local_shape(const TensorShard& shard, int tp_size) {
  check_split_dim(shard);
  std::vector<std::int64_t> shape = shard.logical_shape;
  if (shard.split_dim >= 0) shape[shard.split_dim] = shard_extent(shape[shard.split_dim], tp_size);
  return shape;
}

torch::Tensor shard_of(const torch::Tensor& logical, const TensorShard& shard, int tp_rank,
                       int tp_size) {
  if (shard.split_dim < 0 || tp_size == 1) return logical.clone(at::MemoryFormat::Contiguous);
  const int d = shard.split_dim;
  const std::int64_t local = shard_extent(logical.size(d), tp_size);
  const auto [begin, end] = shard_range(logical.size(d), local, tp_rank);
  if (end - begin == local) return logical.narrow(d, begin, local).contiguous();
  std::vector<std::int64_t> shape = logical.sizes().vec();
  shape[d] = local;
  torch::Tensor out = torch::zeros(shape, logical.options());
  out.narrow(d, 0, end - begin).copy_(logical.narrow(d, begin, end - begin));
  return out;
}

torch::Tensor gather_logical(const torch::Tensor& local, const TensorShard& shard,
                             const CommPtr& tp) {
  if (shard.split_dim < 0 || tp_size_of(tp) == 1) return local;
  const int d = shard.split_dim;
  // all_gather concatenates along dim 0: bring the split dimension to the front and back.
  torch::Tensor gathered = tp->all_gather(local.detach().movedim(d, 0).contiguous());
  return gathered.narrow(0, 0, shard.logical_shape[d]).movedim(0, d).contiguous();
}

std::uint64_t parameter_seed(std::uint64_t seed, const std::string& name) {
  std::uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a of the name
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001B3ULL;
  }
  const std::uint64_t mixed = splitmix64(splitmix64(seed) ^ h);
  // at::CPUGeneratorImpl seeds its Mersenne twister from the low 32 bits only: fold the high
  // half in so that no bit of the hash is thrown away.
  return (mixed ^ (mixed >> 32)) & 0xFFFFFFFFULL;
}

torch::Tensor init_normal_shard(std::uint64_t seed, const std::string& name,
                                const TensorShard& shard, double std, int tp_rank, int tp_size) {
  torch::NoGradGuard no_grad;
  at::Generator generator = at::detail::createCPUGenerator(parameter_seed(seed, name));
  torch::Tensor logical = torch::empty(shard.logical_shape, torch::kFloat);
  logical.normal_(0.0, std, generator);
  return shard_of(logical, shard, tp_rank, tp_size);
}

}  // namespace hpctrain::parallel
