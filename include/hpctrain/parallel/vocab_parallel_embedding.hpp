#pragma once
// An embedding table whose vocabulary rows are split across the tp group. Each rank looks up the
// ids that fall into its rows, writes zeros for the others, and the partial results are summed
// over the group. The same table can serve as a tied output head (logits = hidden @ E_shard^T),
// giving each rank its vocabulary slice of the logits without any rank holding all of them.
//
// Logical parameter: weight [vocab_size, dim], split 0. A vocabulary that does not divide by tp
// is padded up to ceil(vocab_size / tp) rows per rank; the padded rows are zero, are never looked
// up (ids must be < vocab_size), and their logits are masked out by vocab_parallel_cross_entropy
// and vocab_parallel_argmax (see tensor_parallel_shard.hpp for how checkpoints treat them).

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/parallel/tensor_parallel_shard.hpp"

namespace hpctrain::parallel {

class VocabParallelEmbedding : public torch::nn::Module {
 public:
  /// `name` is the layer's state_dict prefix ("wte"), seeding "<name>.weight" with
  /// N(0, init_std^2) on the logical [vocab_size, dim] table. Local.
  VocabParallelEmbedding(std::int64_t vocab_size, std::int64_t dim, CommPtr tp,
                         const std::string& name, std::uint64_t seed, double init_std = 0.02);

  /// int64 ids [...] in [0, vocab_size) -> embeddings [..., dim], the same on every tp rank.
  /// Ids outside this rank's rows contribute zero. Collective over tp (forward all-reduce).
  torch::Tensor forward(const torch::Tensor& ids);

  /// hidden [..., dim] (the same on every tp rank) -> this rank's logits slice
  /// [..., local_vocab()] = hidden @ weight^T; columns of padded rows are 0 and must be masked
  /// by the consumer. Collective over tp (backward all-reduce of the hidden gradient).
  torch::Tensor logits(const torch::Tensor& hidden);

  /// The logical shape and split of each parameter, by name relative to the layer. Local.
  std::vector<std::pair<std::string, TensorShard>> shards() const;
  /// Logical (unpadded) vocabulary size. Local.
  std::int64_t vocab_size() const { return vocab_size_; }
  /// Rows per rank, ceil(vocab_size / tp), padding included. Local.
  std::int64_t local_vocab() const { return local_vocab_; }
  /// First global vocabulary id held by this rank. Local.
  std::int64_t vocab_start() const { return vocab_start_; }

  torch::Tensor weight;  ///< local [ceil(vocab_size / tp), dim]

 private:
  CommPtr tp_;
  std::int64_t vocab_size_;
  std::int64_t local_vocab_;
  std::int64_t vocab_start_;
  TensorShard weight_shard_;
};

}  // namespace hpctrain::parallel
