#pragma once
// Every difference between the LibTorch versions hpctrain supports (1.13 as shipped by Debian,
// and 2.x such as the CUDA builds inside pip's torch) lives here and nowhere else.

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <string>

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

/// Drops autocast's cast cache (call at the end of each autocast region). Local.
inline void clear_autocast_cache() {
  at::autocast::clear_cache();
}

/// bf16 autocast for the device's type while the scope lives (a no-op when `enabled` is false):
/// on at construction, off again and its cast cache cleared at end() or destruction, whatever
/// happens in between (an exception must not leave autocast on for the next forward pass).
/// Training, evaluation and the batch-size search all enter autocast through this. Local.
class AutocastScope {
 public:
  AutocastScope(bool enabled, const torch::Device& device)
      : active_(enabled), cuda_(device.is_cuda()) {
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
      set_cuda_autocast(on, at::kBFloat16);
    } else {
      set_cpu_autocast(on, at::kBFloat16);
    }
  }
  bool active_;
  bool cuda_;
};

}  // namespace hpctrain::compat
