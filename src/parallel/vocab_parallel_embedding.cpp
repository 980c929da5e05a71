#include "hpctrain/parallel/vocab_parallel_embedding.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {

VocabParallelEmbedding::VocabParallelEmbedding(std::int64_t vocab_size, std::int64_t dim,
                                               CommPtr tp, const std::string& name,
                                               std::uint64_t seed, double init_std)
    : tp_(std::move(tp)), vocab_size_(vocab_size) {
  if (vocab_size < 1 || dim < 1) {
    throw ConfigError(
        str(name, ": vocabulary (", vocab_size, ") and dimension (", dim, ") must be positive"));
  }
  const int tp_size = tp_size_of(tp_);
  const int tp_rank = tp_rank_of(tp_);
  local_vocab_ = shard_extent(vocab_size, tp_size);
  vocab_start_ = tp_rank * local_vocab_;
  weight_shard_ = TensorShard{{vocab_size, dim}, 0};
  weight = register_parameter("weight", init_normal_shard(seed, name + ".weight", weight_shard_,
                                                          init_std, tp_rank, tp_size));
}

torch::Tensor VocabParallelEmbedding::forward(const torch::Tensor& ids) {
  if (tp_size_of(tp_) == 1) return torch::embedding(weight, ids);
  torch::Tensor outside = ids.lt(vocab_start_).logical_or_(ids.ge(vocab_start_ + local_vocab_));
  torch::Tensor local_ids = ids.sub(vocab_start_).masked_fill_(outside, 0);
  torch::Tensor out = torch::embedding(weight, local_ids);
  // Zeroing in place also zeroes the gradient of the masked rows in backward, so row 0 does not
  // collect gradient from ids that belong to other ranks.
  out.masked_fill_(outside.unsqueeze(-1), 0);
  return reduce_from_tp_region(out, tp_);
}

torch::Tensor VocabParallelEmbedding::logits(const torch::Tensor& hidden) {
  return torch::linear(copy_to_tp_region(hidden, tp_), weight);
}

std::vector<std::pair<std::string, TensorShard>> VocabParallelEmbedding::shards() const {
  return {{"weight", weight_shard_}};
}

}  // namespace hpctrain::parallel
