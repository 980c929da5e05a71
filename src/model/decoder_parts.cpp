// Pieces shared by the decoder-only language models (decoder_parts.hpp).

#include "hpctrain/model/decoder_parts.hpp"

#include <cmath>
#include <limits>

#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/model/quantized_linear.hpp"
#include "hpctrain/model/recompute.hpp"
#include "hpctrain/model/task_loss.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

torch::Tensor int8_or_float(const Model* owner, parallel::ColumnParallelLinear& layer,
                            const torch::Tensor& x) {
  const QuantizedLinear* q = owner != nullptr ? owner->int8_linear(&layer) : nullptr;
  return q != nullptr ? q->forward(x) : layer.forward(x);
}

torch::Tensor int8_or_float(const Model* owner, parallel::RowParallelLinear& layer,
                            const torch::Tensor& x) {
  const QuantizedLinear* q = owner != nullptr ? owner->int8_linear(&layer) : nullptr;
  return q != nullptr ? q->forward(x) : layer.forward(x);
}

AttentionKernel read_attention_kernel(ConfigSection& section) {
  const std::string attention = section.get<std::string>("attention", "auto");
  if (attention == "auto") {
    return compat::kHasScaledDotProductAttention ? AttentionKernel::kScaledDotProduct
                                                 : AttentionKernel::kExplicit;
  }
  if (attention == "explicit") return AttentionKernel::kExplicit;
  if (attention == "sdpa") {
    if (!compat::kHasScaledDotProductAttention) {
      section.fail("attention", str("sdpa (scaled_dot_product_attention) needs LibTorch 2.0 or "
                                    "later; this build has ",
                                    compat::torch_version(), ": use auto or explicit"));
    }
    return AttentionKernel::kScaledDotProduct;
  }
  section.fail("attention", "must be one of auto, explicit, sdpa");
}

std::vector<DecoderChunk> decoder_chunks(const PipelinePart& pipeline, std::int64_t layers) {
  const int stages = pipeline.stages();
  const std::vector<int> per_stage =
      plan::pipeline_stage_blocks(static_cast<int>(layers), stages, pipeline.layers);
  std::vector<DecoderChunk> chunks;
  for (int c = 0; c < pipeline.virtual_stages; ++c) {
    DecoderChunk chunk;
    chunk.stage = pipeline.stage_of_chunk(c);
    for (int s = 0; s < chunk.stage; ++s) chunk.first += per_stage[static_cast<std::size_t>(s)];
    chunk.end = chunk.first + per_stage[static_cast<std::size_t>(chunk.stage)];
    chunk.embeds = chunk.stage == 0;
    chunk.heads = chunk.stage == stages - 1;
    chunks.push_back(chunk);
  }
  return chunks;
}

std::vector<StageCopy> tied_embedding_copies(const PipelinePart& pipeline,
                                             const std::vector<DecoderChunk>& chunks, bool tied) {
  std::vector<StageCopy> copies;
  const int last = pipeline.stages() - 1;
  // Both copies on one rank would be one parameter (pp = 1): nothing to reconcile.
  if (!tied || plan::stage_rank(0, pipeline.pp) == plan::stage_rank(last, pipeline.pp)) {
    return copies;
  }
  if (chunks.front().embeds) copies.push_back(StageCopy{"wte.weight", last, true});
  if (chunks.back().heads) copies.push_back(StageCopy{"wte.weight", 0, false});
  return copies;
}

void check_token_batch(const torch::Tensor& inputs, std::int64_t seq_len, std::int64_t vocab_size,
                       const std::string& model) {
  if (inputs.dim() != 2 || inputs.scalar_type() != torch::kLong) {
    throw DataError(str(model, ": inputs must be int64 token ids [batch, seq], got ",
                        c10::toString(inputs.scalar_type()), " ", inputs.sizes()));
  }
  const std::int64_t t = inputs.size(1);
  if (t < 1 || t > seq_len) {
    throw DataError(str(model, ": sequences of ", t, " tokens do not fit model.seq_len = ", seq_len,
                        "; use data with at most seq_len tokens per sample"));
  }
  if (inputs.device().is_cpu() && inputs.numel() > 0) {  // on GPUs this would cost a sync
    const auto lo = inputs.min().item<std::int64_t>();
    const auto hi = inputs.max().item<std::int64_t>();
    if (lo < 0 || hi >= vocab_size) {
      throw DataError(str(model, ": token id ", lo < 0 ? lo : hi, " outside the vocabulary [0, ",
                          vocab_size, "); check model.vocab_size against the data"));
    }
  }
}

LossOutput language_model_loss(const torch::Tensor& outputs, const torch::Tensor& targets,
                               const parallel::CommPtr& tp, std::int64_t vocab_size,
                               const std::string& model) {
  if (targets.dim() != 2 || outputs.dim() != 3 || outputs.size(0) != targets.size(0) ||
      outputs.size(1) != targets.size(1)) {
    throw DataError(str(model, ": targets ", targets.sizes(), " do not match logits ",
                        outputs.sizes(), "; expected targets [batch, seq]"));
  }
  if (targets.device().is_cpu() && targets.numel() > 0) {
    const auto lo = targets.min().item<std::int64_t>();
    const auto hi = targets.max().item<std::int64_t>();
    if (lo < 0 || hi >= vocab_size) {
      throw DataError(str(model, ": target id ", lo < 0 ? lo : hi, " outside the vocabulary [0, ",
                          vocab_size, "); check model.vocab_size against the data"));
    }
  }
  torch::Tensor predictions;
  torch::Tensor per_token =
      parallel::token_cross_entropy(outputs, targets, tp, vocab_size, &predictions);
  LossOutput out;
  out.count = targets.numel();
  out.loss = per_token.mean();
  set_metric_sums(out, per_token.detach().sum(torch::kDouble), predictions.eq(targets).sum());
  return out;
}

torch::Tensor CausalMask::get(const torch::Tensor& like, std::int64_t seq_len, std::int64_t t) {
  if (!mask_.defined() || mask_.device() != like.device() ||
      mask_.scalar_type() != like.scalar_type() || mask_.size(0) < seq_len) {
    torch::NoGradGuard no_grad;
    mask_ =
        torch::full({seq_len, seq_len}, -std::numeric_limits<double>::infinity(), like.options())
            .triu_(1);
  }
  return mask_.narrow(0, 0, t).narrow(1, 0, t);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& mask,
                               AttentionKernel kernel, double dropout, bool training,
                               bool recompute_scores) {
  const std::int64_t batch = q.size(0);
  const std::int64_t heads = q.size(1);
  const std::int64_t t = q.size(2);
  const std::int64_t hd = q.size(3);
  const bool again = recompute_scores && training;
  if (kernel == AttentionKernel::kScaledDotProduct) {
    // Causal without a mask tensor (the fused kernels skip masked blocks).
    const double p = training ? dropout : 0.0;
    auto attend = [p](const std::vector<torch::Tensor>& in) {
      return compat::causal_scaled_dot_product_attention(in[0], in[1], in[2], p);
    };
    const std::vector<torch::Tensor> qkv{q, k, v};
    torch::Tensor context = again ? recompute(attend, qkv) : attend(qkv);
    return context.transpose(1, 2).reshape({batch, t, heads * hd});
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  auto core = [mask, scale, dropout, training](const std::vector<torch::Tensor>& in) {
    // scores = mask + q k^T / sqrt(hd) in one fused call; the [T, T] mask broadcasts over B * H.
    torch::Tensor scores =
        torch::baddbmm(mask, in[0], in[1].transpose(1, 2), /*beta=*/1.0, /*alpha=*/scale);
    torch::Tensor probs = torch::softmax(scores, -1);
    if (dropout > 0) probs = torch::dropout(probs, dropout, training);
    return torch::bmm(probs, in[2]);
  };
  const std::vector<torch::Tensor> qkv{q.reshape({batch * heads, t, hd}),
                                       k.reshape({batch * heads, t, hd}),
                                       v.reshape({batch * heads, t, hd})};
  torch::Tensor context = again ? recompute(core, qkv) : core(qkv);
  return context  // [B H, T, hd] -> [B, T, H hd]
      .view({batch, heads, t, hd})
      .transpose(1, 2)
      .reshape({batch, t, heads * hd});
}

}  // namespace hpctrain::model
