#pragma once
// Cross entropy and top-1 predictions over logits that are split along the vocabulary across the
// tp group (each rank holds [..., ceil(V / tp)] columns, rank r starting at global id
// r * ceil(V / tp)), without any rank ever holding the full logits:
//   - the row maximum is all-reduced (max), the sum of exp(logit - max) and the target's logit
//     (masked to zero on ranks that do not own the target) are all-reduced (sum) in one call;
//   - loss = log(sum exp) - (target logit - max); the backward is softmax - one_hot(target),
//     computed from the softmax saved by the forward, as in Megatron;
//   - the argmax is the lowest global id reaching the all-reduced maximum (all-reduce min of the
//     candidate ids), so ties resolve exactly as torch::argmax on the full logits does.
// Columns past the logical vocabulary (padding) are masked to -inf. Arithmetic is float32
// (float64 for float64 logits); the result is the same on every tp rank.

#include <torch/torch.h>

#include <cstdint>

#include "hpctrain/parallel/tensor_parallel_ops.hpp"

namespace hpctrain::parallel {

/// Per-token cross entropy [...] (float32, or float64 for float64 logits) of vocabulary-sharded
/// `logits` [..., ceil(vocab_size / tp)] against int64 `targets` [...] in [0, vocab_size).
/// Differentiable with respect to `logits`. When `predictions` is given, it receives the global
/// top-1 ids [...] (int64) at the cost of one more small all-reduce. Collective over tp.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits,
                                           const torch::Tensor& targets, const CommPtr& tp,
                                           std::int64_t vocab_size,
                                           torch::Tensor* predictions = nullptr);

/// Which function computes a language model's per-token loss.
enum class CrossEntropyKernel {
  kVocabParallel,  ///< vocab_parallel_cross_entropy: tp > 1, and every CPU run
  kLibTorch,       ///< libtorch_cross_entropy: LibTorch's fused log_softmax and nll_loss kernels
};
/// The kernel for a tp group of `tp_size` on `device`: LibTorch's own at tp = 1 on a GPU (one
/// fused kernel each way instead of a chain of elementwise passes over [tokens, vocab]); the
/// vocab-parallel function wherever the vocabulary is split, and on the CPU, whose results stay
/// bitwise those of earlier releases. Local, pure.
CrossEntropyKernel choose_cross_entropy(int tp_size, c10::DeviceType device);

/// Per-token cross entropy [...] of full-vocabulary `logits` [..., vocab] against `targets` [...]
/// through LibTorch (log_softmax in float32, or float64 for float64 logits, then nll_loss), and the
/// top-1 ids in `predictions` when given (lowest id on ties). The same values as
/// vocab_parallel_cross_entropy at tp = 1 up to float rounding. Differentiable. Local.
torch::Tensor libtorch_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                     torch::Tensor* predictions = nullptr);

/// The per-token loss through choose_cross_entropy's kernel (the arguments of
/// vocab_parallel_cross_entropy). Collective over tp when tp > 1.
torch::Tensor token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                  const CommPtr& tp, std::int64_t vocab_size,
                                  torch::Tensor* predictions = nullptr);

/// Global top-1 ids [...] (int64, lowest id on ties) of vocabulary-sharded `logits`
/// [..., ceil(vocab_size / tp)]. Not differentiable. Collective over tp.
torch::Tensor vocab_parallel_argmax(const torch::Tensor& logits, const CommPtr& tp,
                                    std::int64_t vocab_size);

}  // namespace hpctrain::parallel
