#pragma once
// Incremental decoding (docs/GENERATE.md): the keys and values of every attention layer for the
// positions a model has read so far, so each new token costs one position's work instead of the
// whole sequence's. A language model that decodes incrementally implements IncrementalDecoder
// beside Model (the gpt and the llama family do): make_kv_cache gives a cache, forward_cached
// reads and extends it. Nothing in KvCache is specific to one family: a decoder gives each
// attention layer its index and appends that layer's keys and values; the cache keeps the rows'
// left padding, and from it the attention mask and the position ids of new tokens.
//
// A batch of prompts of different lengths is left-padded to the longest: row b's first pad[b]
// positions hold padding that no query attends to, and its tokens are numbered from 0 after them,
// so each row computes what it would compute alone.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace hpctrain::model {

class Model;

class KvCache {
 public:
  /// Room for `capacity` positions of `batch` rows in `layers` attention layers of `heads`
  /// key/value heads (those this rank computes under tensor parallelism; fewer than the query heads
  /// under grouped-query attention) of `head_dim` values each, as `options` (the model's dtype and
  /// device). `padding` [batch] (int64, CPU): each row's left padding. Local.
  KvCache(std::int64_t layers, std::int64_t batch, std::int64_t heads, std::int64_t head_dim,
          std::int64_t capacity, const torch::TensorOptions& options, torch::Tensor padding);

  /// Positions filled so far (the same for every row, padding included). Local.
  std::int64_t length() const { return length_; }
  std::int64_t capacity() const { return capacity_; }
  std::int64_t batch() const { return batch_; }
  /// Writes layer `layer`'s keys and values of `t` new positions (k, v: [batch, heads, t,
  /// head_dim]) after length() and returns the layer's keys and values of all length() + t
  /// positions (views of the cache). Throws Error past the capacity. Local.
  std::pair<torch::Tensor, torch::Tensor> append(std::int64_t layer, const torch::Tensor& k,
                                                 const torch::Tensor& v);
  /// Marks `t` more positions filled, once every layer appended them. Local.
  void advance(std::int64_t t);
  /// The additive attention mask [batch, 1, t, length() + t] of `t` new queries, in `like`'s dtype
  /// and on its device: 0 where a query may attend, -inf on padding and on later positions. Local.
  torch::Tensor mask(std::int64_t t, const torch::Tensor& like) const;
  /// Position ids [batch, t] (int64, on `device`) of `t` new tokens: their index after the row's
  /// padding (0 for padding itself). Local.
  torch::Tensor positions(std::int64_t t, const torch::Device& device) const;

 private:
  std::vector<torch::Tensor> keys_;  // per layer [batch, heads, capacity, head_dim]
  std::vector<torch::Tensor> values_;
  torch::Tensor padding_;  // [batch] int64, CPU
  std::int64_t batch_ = 0;
  std::int64_t capacity_ = 0;
  std::int64_t length_ = 0;
};

/// What a language model offers text generation and scoring beyond Model: incremental decoding
/// and the whole vocabulary's view of its (possibly vocabulary-parallel) logits. A family
/// implements it beside Model; decoder_of() finds it.
class IncrementalDecoder {
 public:
  virtual ~IncrementalDecoder() = default;
  /// A KV cache for `batch` rows of up to `capacity` positions whose left padding is `padding`
  /// ([batch] int64), or null when this model cannot decode incrementally (a pipeline stage).
  /// Local.
  virtual std::unique_ptr<KvCache> make_kv_cache(std::int64_t batch, std::int64_t capacity,
                                                 const torch::Tensor& padding) = 0;
  /// Outputs as Model::forward returns them (logits; this rank's vocabulary slice) of `tokens`
  /// [batch, t], the positions after cache.length(), attending over the cached positions before
  /// them; appends the new positions' keys and values and advances the cache. Collective over tp.
  virtual torch::Tensor forward_cached(const torch::Tensor& tokens, KvCache& cache) = 0;
  /// The longest sequence the model reads (its position table's rows). Local.
  virtual std::int64_t context_length() const = 0;
  /// The whole vocabulary's logits from Model::forward's outputs [..., V_local]: gathered over
  /// the tp group, without padding columns, the same on every tp rank. Collective over tp.
  virtual torch::Tensor full_logits(const torch::Tensor& outputs) = 0;
  /// log p(target) of every target [...] (int64) under Model::forward's outputs [..., V_local],
  /// float32. Collective over tp.
  virtual torch::Tensor target_log_probs(const torch::Tensor& outputs,
                                         const torch::Tensor& targets) = 0;
};

/// `model`'s IncrementalDecoder, or null. Local.
IncrementalDecoder* decoder_of(Model& model);
/// The whole vocabulary's logits of `outputs`: the decoder's full_logits, else the outputs
/// themselves (a model that is not tensor-parallel). Collective over tp.
torch::Tensor full_logits(Model& model, const torch::Tensor& outputs);
/// log p(target) under `outputs`: the decoder's, else log_softmax of the outputs. Collective
/// over tp.
torch::Tensor target_log_probs(Model& model, const torch::Tensor& outputs,
                               const torch::Tensor& targets);
/// The decoder's context_length(), else 0 (no limit known). Local.
std::int64_t context_length(Model& model);

}  // namespace hpctrain::model
