#pragma once
// Device binding: how many CPU threads this rank uses and which GPU, if any, it drives.

#include <string>

namespace hpctrain::runtime {

class Runtime;

/// What the user asked for. Local value type.
struct DeviceRequest {
  /// Intra-op threads per rank; 0 = derive from the cores available to this rank.
  int threads = 0;
  /// "auto" (GPU = local rank when CUDA is available, else CPU), "cpu" or "cuda".
  std::string device = "auto";
};

/// The binding in effect. Local value type.
struct DeviceBinding {
  std::string device = "cpu";  ///< "cpu" or "cuda:N"
  int cuda_index = -1;         ///< N of cuda:N, -1 on CPU
  int cuda_device_count = 0;   ///< devices visible to this process
  int threads = 1;             ///< intra-op threads set in LibTorch (and OpenBLAS)
  std::string threads_source;  ///< why that many: "--threads", "HPCTRAIN_THREADS", "affinity", ...
  int cores_visible = 1;       ///< CPUs in this process's affinity mask
  bool flush_denormal = true;  ///< CPU denormal floats flushed to zero (HPCTRAIN_FLUSH_DENORMAL)
  bool cpu_onednn = true;      ///< CPU convolutions through oneDNN (HPCTRAIN_CPU_ONEDNN)
};

/// Number of CPUs in this process's affinity mask. Local.
int affinity_cpu_count();

/// Chooses threads and device for this rank and applies them (torch::set_num_threads, OpenBLAS
/// threads, cudaSetDevice through LibTorch). Order for threads: request.threads, then
/// HPCTRAIN_THREADS, then cores in the affinity mask (if the launcher bound the rank) or the
/// node's cores divided by ranks per node. Flushes CPU denormals to zero (FTZ/DAZ) in this thread
/// and the threads it starts afterwards, unless HPCTRAIN_FLUSH_DENORMAL=0: Adam's moments of
/// weights whose gradient stays zero decay into the denormal range after ~800 steps, where every
/// arithmetic operation on them is ~100x slower. CPU convolutions use oneDNN where
/// compat::kCpuOneDnnByDefault says so (LibTorch 1.13) or HPCTRAIN_CPU_ONEDNN=1, else LibTorch's
/// own kernels (HPCTRAIN_CPU_ONEDNN=0 forces those anywhere). Throws ConfigError for device
/// "cuda" without CUDA. Local.
DeviceBinding bind_device(const Runtime& runtime, const DeviceRequest& request);

/// Whether LibTorch was built with CUDA and sees a device. Local.
bool cuda_available();

}  // namespace hpctrain::runtime
