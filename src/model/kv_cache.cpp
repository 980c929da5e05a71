#include "hpctrain/model/kv_cache.hpp"

#include <limits>

#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

KvCache::KvCache(std::int64_t layers, std::int64_t batch, std::int64_t heads, std::int64_t head_dim,
                 std::int64_t capacity, const torch::TensorOptions& options, torch::Tensor padding)
    : padding_(std::move(padding)), batch_(batch), capacity_(capacity) {
  if (padding_.numel() != batch || padding_.scalar_type() != torch::kLong) {
    throw Error(str("KvCache: padding must be int64 [", batch, "] (internal error)"));
  }
  padding_ = padding_.to(torch::kCPU).contiguous();
  for (std::int64_t l = 0; l < layers; ++l) {
    // Zeros, not empty: padding positions are read (then masked) by every query.
    keys_.push_back(torch::zeros({batch, heads, capacity, head_dim}, options));
    values_.push_back(torch::zeros({batch, heads, capacity, head_dim}, options));
  }
}

std::pair<torch::Tensor, torch::Tensor> KvCache::append(std::int64_t layer, const torch::Tensor& k,
                                                        const torch::Tensor& v) {
  const std::int64_t t = k.size(2);
  if (length_ + t > capacity_) {
    throw Error(str("KvCache: ", length_, " + ", t, " positions exceed its capacity of ", capacity_,
                    " (internal error)"));
  }
  auto& keys = keys_.at(static_cast<std::size_t>(layer));
  auto& values = values_.at(static_cast<std::size_t>(layer));
  keys.narrow(2, length_, t).copy_(k);
  values.narrow(2, length_, t).copy_(v);
  return {keys.narrow(2, 0, length_ + t), values.narrow(2, 0, length_ + t)};
}

void KvCache::advance(std::int64_t t) {
  length_ += t;
}

torch::Tensor KvCache::mask(std::int64_t t, const torch::Tensor& like) const {
  const std::int64_t total = length_ + t;
  // key j is visible to query i (absolute position length_ + i) when j <= length_ + i and j is
  // not in the row's padding. A padding query sees itself: its row of scores is never all -inf
  // (a softmax of which would be NaN, and NaN values times a zero weight stay NaN).
  const auto key = torch::arange(total, torch::kLong).view({1, 1, total});
  const auto query = torch::arange(length_, total, torch::kLong).view({1, t, 1});
  const auto pad = padding_.view({batch_, 1, 1});
  const auto visible =
      key.le(query).logical_and(key.ge(pad)).logical_or(key.eq(query));  // [batch, t, total]
  auto out = torch::zeros({batch_, t, total}, torch::kFloat32)
                 .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
  return out.unsqueeze(1).to(like.device(), like.scalar_type());
}

torch::Tensor KvCache::positions(std::int64_t t, const torch::Device& device) const {
  const auto index = torch::arange(length_, length_ + t, torch::kLong).view({1, t});
  return (index - padding_.view({batch_, 1})).clamp_min(0).to(device);
}

IncrementalDecoder* decoder_of(Model& model) {
  return dynamic_cast<IncrementalDecoder*>(&model);
}

torch::Tensor full_logits(Model& model, const torch::Tensor& outputs) {
  IncrementalDecoder* decoder = decoder_of(model);
  return decoder != nullptr ? decoder->full_logits(outputs) : outputs;
}

torch::Tensor target_log_probs(Model& model, const torch::Tensor& outputs,
                               const torch::Tensor& targets) {
  if (IncrementalDecoder* decoder = decoder_of(model)) {
    return decoder->target_log_probs(outputs, targets);
  }
  return torch::log_softmax(outputs.to(torch::kFloat32), -1)
      .gather(-1, targets.unsqueeze(-1))
      .squeeze(-1);
}

std::int64_t context_length(Model& model) {
  IncrementalDecoder* decoder = decoder_of(model);
  return decoder != nullptr ? decoder->context_length() : 0;
}

}  // namespace hpctrain::model
