#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include "hpctrain/parallel/tensor_parallel_ops.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Where this rank's columns sit in the global vocabulary.
struct VocabSlice {
  std::int64_t local = 0;  // columns per rank, padding included
  std::int64_t start = 0;  // first global id
  std::int64_t real = 0;   // columns that are real vocabulary (the rest is padding)
};

VocabSlice vocab_slice(const torch::Tensor& logits, const CommPtr& tp, std::int64_t vocab_size,
                       const char* what) {
  const int tp_size = tp_size_of(tp);
  VocabSlice s;
  s.local = logits.dim() > 0 ? logits.size(-1) : 0;
  if (vocab_size < 1 || s.local != shard_extent(vocab_size, tp_size)) {
    throw Error(str(what, ": logits have ", s.local, " vocabulary columns per rank, but a ",
                    "vocabulary of ", vocab_size, " split over tp = ", tp_size, " needs ",
                    shard_extent(std::max<std::int64_t>(vocab_size, 1), tp_size)));
  }
  s.start = tp_rank_of(tp) * s.local;
  s.real = std::clamp<std::int64_t>(vocab_size - s.start, 0, s.local);
  return s;
}

c10::ScalarType compute_dtype(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Row maxima over the real vocabulary, all-reduced; optionally the global argmax (lowest id).
torch::Tensor global_max(const torch::Tensor& logits2d, const VocabSlice& s, const CommPtr& tp,
                         torch::Tensor* argmax) {
  torch::NoGradGuard no_grad;
  const auto dtype = compute_dtype(logits2d);
  const std::int64_t n = logits2d.size(0);
  torch::Tensor local_max;
  torch::Tensor local_idx;
  if (s.real > 0) {
    // max(dim) returns the first maximal index, like argmax.
    std::tie(local_max, local_idx) = logits2d.narrow(1, 0, s.real).max(1);
    local_max = local_max.to(dtype);
  } else {  // a rank holding only padding never wins
    local_max =
        torch::full({n}, -std::numeric_limits<double>::infinity(), logits2d.options().dtype(dtype));
    local_idx = torch::zeros({n}, logits2d.options().dtype(torch::kLong));
  }
  if (!is_parallel(tp)) {
    if (argmax) *argmax = local_idx;
    return local_max;
  }
  torch::Tensor maxima = argmax ? local_max.clone() : local_max;
  {
    TpCommTimer timer;
    tp->all_reduce(maxima, comm::ReduceOp::kMax);
  }
  if (argmax) {
    torch::Tensor candidate = local_idx.add_(s.start).masked_fill_(
        local_max.ne(maxima), std::numeric_limits<std::int64_t>::max());
    TpCommTimer timer;
    tp->all_reduce(candidate, comm::ReduceOp::kMin);
    *argmax = candidate;
  }
  return maxima;
}

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& targets, const torch::Tensor& maxima,
                               CommPtr tp, VocabSlice s) {
    const std::int64_t n = maxima.size(0);
    torch::Tensor logits2d = logits.reshape({n, s.local});
    // One new [n, local] tensor holds logits - max, then exp, then the softmax saved for
    // backward (type promotion widens bfloat16/float16 logits here, once).
    torch::Tensor work = torch::sub(logits2d, maxima.unsqueeze(1));
    if (s.real < s.local) {
      work.narrow(1, s.real, s.local - s.real).fill_(-std::numeric_limits<double>::infinity());
    }
    torch::Tensor flat_targets = targets.reshape({n});
    torch::Tensor outside =
        flat_targets.lt(s.start).logical_or_(flat_targets.ge(s.start + s.local));
    torch::Tensor local_targets = flat_targets.sub(s.start).masked_fill_(outside, 0);
    // stats[0]: target logit - max (0 on ranks not owning the target); stats[1]: sum of exps.
    torch::Tensor stats = torch::empty({2, n}, work.options());
    stats[0].copy_(work.gather(1, local_targets.unsqueeze(1)).squeeze(1).masked_fill_(outside, 0));
    work.exp_();
    torch::Tensor sum_exp = stats[1];
    sum_exp.copy_(work.sum(1));
    if (is_parallel(tp)) {
      TpCommTimer timer;
      tp->all_reduce(stats, comm::ReduceOp::kSum);
    }
    torch::Tensor loss = sum_exp.log().sub_(stats[0]);
    work.div_(sum_exp.unsqueeze(1));  // softmax
    ctx->save_for_backward({work, local_targets, outside});
    ctx->saved_data["sizes"] = logits.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(logits.scalar_type());
    return loss.view(targets.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    const torch::Tensor& local_targets = saved[1];
    const torch::Tensor& outside = saved[2];
    torch::Tensor g = grads[0].reshape({-1}).to(softmax.scalar_type());
    // d loss_i / d logit_ij = softmax_ij - [j == target_i], times the incoming gradient; out of
    // place so that the graph can be run backward twice (retain_graph).
    torch::Tensor grad = softmax.mul(g.unsqueeze(1));
    grad.scatter_add_(1, local_targets.unsqueeze(1), g.masked_fill(outside, 0).neg_().unsqueeze(1));
    const auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    grad = grad.view(ctx->saved_data["sizes"].toIntVector()).to(dtype);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, const CommPtr& tp,
                                           std::int64_t vocab_size, torch::Tensor* predictions) {
  const VocabSlice s = vocab_slice(logits, tp, vocab_size, "vocab_parallel_cross_entropy");
  if (targets.numel() * s.local != logits.numel()) {
    throw Error(str("vocab_parallel_cross_entropy: targets ", targets.sizes(),
                    " do not match logits ", logits.sizes(), " (expected logits [targets..., ",
                    s.local, "])"));
  }
  torch::Tensor logits2d = logits.detach().reshape({-1, s.local});
  torch::Tensor argmax;
  torch::Tensor maxima = global_max(logits2d, s, tp, predictions ? &argmax : nullptr);
  if (predictions) *predictions = argmax.view(targets.sizes());
  return VocabParallelCrossEntropy::apply(logits, targets, maxima, tp, s);
}

CrossEntropyKernel choose_cross_entropy(int tp_size, c10::DeviceType device) {
  return tp_size == 1 && device != c10::DeviceType::CPU ? CrossEntropyKernel::kLibTorch
                                                        : CrossEntropyKernel::kVocabParallel;
}

torch::Tensor libtorch_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                     torch::Tensor* predictions) {
  if (logits.dim() < 1 || targets.numel() * logits.size(-1) != logits.numel()) {
    throw Error(str("libtorch_cross_entropy: targets ", targets.sizes(), " do not match logits ",
                    logits.sizes(), " (expected logits [targets..., vocab])"));
  }
  const torch::Tensor logits2d = logits.reshape({-1, logits.size(-1)});
  if (predictions) {
    torch::NoGradGuard no_grad;
    *predictions = logits2d.argmax(1).view(targets.sizes());  // the first maximal id
  }
  // The dtype argument widens bfloat16/float16 logits inside the kernel (no separate copy).
  const torch::Tensor log_probs = torch::log_softmax(logits2d, 1, compute_dtype(logits));
  return torch::nll_loss(log_probs, targets.reshape({-1}), /*weight=*/{}, at::Reduction::None)
      .view(targets.sizes());
}

torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                  const CommPtr& tp, std::int64_t vocab_size,
                                  torch::Tensor* predictions) {
  if (choose_cross_entropy(tp_size_of(tp), logits.device().type()) ==
      CrossEntropyKernel::kLibTorch) {
    vocab_slice(logits, tp, vocab_size, "token_cross_entropy");  // the vocabulary's size
    return libtorch_cross_entropy(logits, targets, predictions);
  }
  return vocab_parallel_cross_entropy(logits, targets, tp, vocab_size, predictions);
}

torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, const CommPtr& tp,
                                    std::int64_t vocab_size) {
  const VocabSlice s = vocab_slice(logits, tp, vocab_size, "vocab_parallel_argmax");
  std::vector<std::int64_t> shape = logits.sizes().vec();
  shape.pop_back();
  torch::Tensor argmax;
  global_max(logits.detach().reshape({-1, s.local}), s, tp, &argmax);
  return argmax.view(shape);
}

}  // namespace hpctrain::parallel
