#include "hpctrain/runtime/device.hpp"

// The three LibTorch headers this file calls into, not <torch/torch.h>: runtime is compiled
// without the LibTorch precompiled header (cmake/HpctrainTargets.cmake).
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sched.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "hpctrain/compat/torch_version.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

int parse_positive(const char* text, const char* what) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 1 || value > 4096) {
    throw ConfigError(str(what, " = '", text, "' is not a thread count: use a positive integer"));
  }
  return static_cast<int>(value);
}

// Debian's LibTorch does its matrix products in the system BLAS (OpenBLAS when installed), whose
// pthread pool ignores torch::set_num_threads. Several ranks per node each running a pool sized
// to every core oversubscribe the node, so set it explicitly when OpenBLAS is loaded.
void set_blas_threads(int threads) {
  using SetThreads = void (*)(int);
  if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    fn(threads);
  }
}

}  // namespace

int affinity_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return CPU_COUNT(&set);
}

bool cuda_available() {
  return torch::cuda::is_available();
}

DeviceBinding bind_device(const Runtime& runtime, const DeviceRequest& request) {
  DeviceBinding binding;
  binding.cores_visible = affinity_cpu_count();
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (request.threads > 0) {
    binding.threads = request.threads;
    binding.threads_source = "--threads";
  } else if (const char* env = std::getenv("HPCTRAIN_THREADS")) {
    binding.threads = parse_positive(env, "HPCTRAIN_THREADS");
    binding.threads_source = "HPCTRAIN_THREADS";
  } else if (online > 0 && binding.cores_visible < online) {
    // The launcher bound this rank to a core set (mpirun's default, srun --cpu-bind): use it all.
    binding.threads = binding.cores_visible;
    binding.threads_source = "affinity mask";
  } else {
    binding.threads = std::max(1, binding.cores_visible / std::max(1, runtime.local_size()));
    binding.threads_source =
        str(binding.cores_visible, " cores / ", runtime.local_size(), " ranks on the node");
  }
  // Before the intra-op pool and any worker thread start: new threads inherit the FP mode.
  const char* flush_env = std::getenv("HPCTRAIN_FLUSH_DENORMAL");
  binding.flush_denormal = flush_env == nullptr || std::string(flush_env) != "0";
  at::globalContext().setFlushDenormal(binding.flush_denormal);
  at::set_num_threads(binding.threads);
  set_blas_threads(binding.threads);
  // oneDNN's CPU convolutions: on by default only where they are known to compute finite
  // gradients (compat::kCpuOneDnnByDefault); HPCTRAIN_CPU_ONEDNN=1 or 0 decides otherwise.
  const char* onednn_env = std::getenv("HPCTRAIN_CPU_ONEDNN");
  binding.cpu_onednn =
      onednn_env == nullptr ? compat::kCpuOneDnnByDefault : std::string(onednn_env) != "0";
  at::globalContext().setUserEnabledMkldnn(binding.cpu_onednn);

  const bool have_cuda = cuda_available();
  binding.cuda_device_count = have_cuda ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (request.device == "cuda" && !have_cuda) {
    throw ConfigError(
        "device 'cuda' requested but this hpctrain sees no CUDA device (LibTorch "
        "without CUDA, or no GPU allocated: check --gres/--gpus and nvidia-smi); "
        "use --device cpu or auto");
  }
  if (request.device != "auto" && request.device != "cpu" && request.device != "cuda") {
    throw ConfigError(str("device '", request.device, "' is unknown: use auto, cpu or cuda"));
  }
  if (have_cuda && request.device != "cpu") {
    binding.cuda_index = runtime.local_rank() % binding.cuda_device_count;
    binding.device = str("cuda:", binding.cuda_index);
  }
  return binding;
}

}  // namespace hpctrain::runtime
