#pragma once
// Every difference between the LibTorch versions hpctrain supports (1.13 as shipped by Debian,
// and 2.x such as the CUDA builds inside pip's torch) lives here and nowhere else.

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <stdexcept>
#include <string>
#include <vector>

#define HPCTRAIN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace hpctrain::compat {

/// "1.13.1" etc. Local.
inline std::string torch_version() {
  return TORCH_VERSION;
}

/// Turns CPU autocast on or off with the given lower-precision dtype. Local (thread state).
inline void set_cpu_autocast(bool enabled, at::ScalarType dtype) {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
#else
  at::autocast::set_cpu_enabled(enabled);
  at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

/// Turns CUDA autocast on or off with the given dtype. Local (thread state).
inline void set_cuda_autocast(bool enabled, at::ScalarType dtype) {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_enabled(enabled);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

/// True where LibTorch has at::scaled_dot_product_attention (2.0 and later: fused flash and
/// memory-efficient kernels on GPU). Local.
constexpr bool kHasScaledDotProductAttention = HPCTRAIN_TORCH_AT_LEAST(2, 0);

/// Causal attention of q, k, v [B, H, T, hd] through scaled_dot_product_attention (dropout on the
/// probabilities with `dropout`). Only where kHasScaledDotProductAttention; throws otherwise.
/// Local.
inline torch::Tensor causal_scaled_dot_product_attention(const torch::Tensor& q,
                                                         const torch::Tensor& k,
                                                         const torch::Tensor& v, double dropout) {
#if HPCTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
#else
  (void)q;
  (void)k;
  (void)v;
  (void)dropout;
  throw std::logic_error("scaled_dot_product_attention needs LibTorch 2.0 or later");
#endif
}

/// c10::Allocator for hpctrain's own CPU allocators, one interface across versions: derive and
/// implement allocate_block(). LibTorch 2.3 made Allocator::allocate non-const (it changes the
/// allocator's state) and added the pure virtual copy_data (used by Allocator::clone); 1.13's
/// allocate is const. Local.
class CpuAllocatorBase : public c10::Allocator {
 public:
#if HPCTRAIN_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override {
    return allocate_block(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override {
    return allocate_block(n);
  }
#endif

 protected:
  /// What Allocator::allocate returns for `n` bytes.
  virtual c10::DataPtr allocate_block(size_t n) const = 0;
};

/// True where LibTorch has the fused multi-tensor Adam and AdamW kernels (at::_fused_adam_,
/// at::_fused_adamw_: CUDA from 2.0, the CPU too from 2.4). Local.
constexpr bool kHasFusedAdam = HPCTRAIN_TORCH_AT_LEAST(2, 0);
/// Whether those kernels exist for tensors on `device` in this LibTorch. Local.
inline bool fused_adam_runs_on(c10::DeviceType device) {
  if (device == c10::DeviceType::CUDA) return kHasFusedAdam;
  if (device == c10::DeviceType::CPU) return HPCTRAIN_TORCH_AT_LEAST(2, 4);
  return false;
}

/// How an Adam or AdamW update runs (train/optimizer.cpp).
enum class AdamKernel {
  kCpuLoop,      ///< hpctrain's single-pass loop over contiguous float32 CPU buffers
  kFusedDevice,  ///< LibTorch's fused multi-tensor kernel (fused_adam_step), on CUDA
  kTensorOps,    ///< one LibTorch operation per line of the update rule: any device and dtype
};

/// The kernel for parameters and gradients of `dtype` on `device` (`contiguous`: both are).
/// `fused_on_cuda`: whether this LibTorch has the fused kernels on CUDA (kHasFusedAdam; tests pass
/// either). The CPU keeps hpctrain's own loop (its results are bitwise those of every earlier
/// release); CUDA takes the fused kernel where there is one. Local, pure.
inline AdamKernel choose_adam_kernel(c10::DeviceType device, c10::ScalarType dtype, bool contiguous,
                                     bool fused_on_cuda = kHasFusedAdam) {
  if (device == c10::DeviceType::CPU && dtype == at::kFloat && contiguous) {
    return AdamKernel::kCpuLoop;
  }
  const bool floating =
      dtype == at::kFloat || dtype == at::kDouble || dtype == at::kHalf || dtype == at::kBFloat16;
  if (device == c10::DeviceType::CUDA && fused_on_cuda && floating) return AdamKernel::kFusedDevice;
  return AdamKernel::kTensorOps;
}

/// One Adam (`decoupled` false: L2 weight decay added to the gradient) or AdamW (decoupled weight
/// decay) update of every tensor of `params` in LibTorch's fused kernel: torch.optim's
/// fused=True rule, the moments updated in place. The lists match element for element (same
/// dtype and device); `step` is a float32 tensor on their device holding the update count, bias
/// corrections included. Only where fused_adam_runs_on(the device); throws std::logic_error on
/// an older LibTorch and c10::Error where LibTorch refuses the tensors. Local.
inline void fused_adam_step(const std::vector<at::Tensor>& params,
                            const std::vector<at::Tensor>& grads,
                            const std::vector<at::Tensor>& exp_avgs,
                            const std::vector<at::Tensor>& exp_avg_sqs, const at::Tensor& step,
                            double lr, double beta1, double beta2, double weight_decay, double eps,
                            bool decoupled) {
#if HPCTRAIN_TORCH_AT_LEAST(2, 0)
  const std::vector<at::Tensor> steps(params.size(), step);
  if (decoupled) {
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, at::TensorList(), steps, lr, beta1,
                      beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  } else {
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, at::TensorList(), steps, lr, beta1,
                     beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)step, (void)lr;
  (void)beta1, (void)beta2, (void)weight_decay, (void)eps, (void)decoupled;
  throw std::logic_error("the fused Adam kernels need LibTorch 2.0 or later");
#endif
}

/// Whether CPU / CUDA autocast is on in this thread. Local.
inline bool cpu_autocast_enabled() {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}
inline bool cuda_autocast_enabled() {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

/// The lower-precision dtype CPU / CUDA autocast casts to in this thread (bfloat16 or float16).
/// Local.
inline at::ScalarType cpu_autocast_dtype() {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(at::kCPU);
#else
  return at::autocast::get_autocast_cpu_dtype();
#endif
}
inline at::ScalarType cuda_autocast_dtype() {
#if HPCTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(at::kCUDA);
#else
  return at::autocast::get_autocast_gpu_dtype();
#endif
}

/// Whether float32 work on CUDA may use TF32 tensor cores: matrix products (cuBLAS) and
/// convolutions (cuDNN). LibTorch's defaults, like PyTorch's: matmul off, cuDNN on.
struct Tf32 {
  bool matmul = false;
  bool cudnn = true;
};
/// The process's TF32 settings now. Local.
inline Tf32 tf32() {
  return {at::globalContext().allowTF32CuBLAS(), at::globalContext().allowTF32CuDNN()};
}
/// Sets both (the legacy setters, present in every supported version; later PyTorch maps them
/// onto its fp32_precision settings). Local (process state).
inline void set_tf32(const Tf32& t) {
  at::globalContext().setAllowTF32CuBLAS(t.matmul);
  at::globalContext().setAllowTF32CuDNN(t.cudnn);
}

/// Drops autocast's cast cache (call at the end of each autocast region). Local.
inline void clear_autocast_cache() {
  at::autocast::clear_cache();
}

/// Autocast for the device's type while the scope lives, with a lower-precision dtype (bfloat16,
/// or float16 on CUDA; a no-op when off): on at construction, off again and its cast cache
/// cleared at end() or destruction, whatever happens in between (an exception must not leave
/// autocast on for the next forward pass). Training, evaluation and the batch-size search all
/// enter autocast through this. Local.
class AutocastScope {
 public:
  /// bfloat16 autocast when `enabled`.
  AutocastScope(bool enabled, const torch::Device& device)
      : AutocastScope(enabled ? at::kBFloat16 : at::kFloat, device) {}
  /// Autocast to `dtype` (at::kBFloat16 or at::kHalf); at::kFloat means off.
  AutocastScope(at::ScalarType dtype, const torch::Device& device)
      : active_(dtype != at::kFloat), cuda_(device.is_cuda()), dtype_(dtype) {
    if (active_) set(true);
  }
  ~AutocastScope() { end(); }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

  /// Leaves autocast now (idempotent); the destructor then does nothing. Local.
  void end() {
    if (!active_) return;
    active_ = false;
    set(false);
    clear_autocast_cache();
  }

 private:
  void set(bool on) {
    if (cuda_) {
      set_cuda_autocast(on, dtype_);
    } else {
      set_cpu_autocast(on, dtype_);
    }
  }
  bool active_;
  bool cuda_;
  at::ScalarType dtype_;
};

}  // namespace hpctrain::compat
