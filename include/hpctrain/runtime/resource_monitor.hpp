#pragma once
// What a process uses of its machine, sampled on demand: CPU utilisation since the previous
// sample, resident memory and its peak (/proc/self/status), and on a GPU the device's utilisation
// and memory through NVML, which is loaded at run time (dlopen of libnvidia-ml.so.1) so that
// hpctrain neither links nor needs the driver library; without it the device fields stay unset.

#include <chrono>
#include <cstdint>

namespace hpctrain::runtime {

/// One sample of this process's resources. Device fields are -1 when not measured.
struct ResourceSample {
  double cpu_percent = 0;           ///< process CPU time over wall time since the last sample x 100
  std::int64_t rss_bytes = 0;       ///< resident set size now (VmRSS)
  std::int64_t peak_rss_bytes = 0;  ///< high-water mark of the resident set (VmHWM)
  double device_util_percent = -1;  ///< NVML's GPU utilisation of the last sample period
  std::int64_t device_memory_bytes = -1;  ///< device memory in use (all processes on the device)
};

/// Samples this process (and its CUDA device). Local; not thread-safe.
class ResourceMonitor {
 public:
  /// `cuda_index` < 0: no device fields. Otherwise NVML is loaded; when that fails, one line says
  /// so and the device fields stay -1. Local.
  explicit ResourceMonitor(int cuda_index = -1);
  ~ResourceMonitor();
  ResourceMonitor(const ResourceMonitor&) = delete;
  ResourceMonitor& operator=(const ResourceMonitor&) = delete;

  /// A new sample (CPU utilisation since the previous one, or since construction). Local.
  ResourceSample sample();
  /// The latest sample, without measuring again. Local.
  const ResourceSample& last() const { return last_; }
  /// The most device memory any sample saw (-1: not measured). Local.
  std::int64_t peak_device_memory_bytes() const { return peak_device_; }

 private:
  struct Nvml;
  double cpu_seconds() const;
  std::chrono::steady_clock::time_point wall_;
  double cpu_ = 0;
  ResourceSample last_;
  std::int64_t peak_device_ = -1;
  Nvml* nvml_ = nullptr;
};

/// Resident set size and its peak in bytes, from /proc/self/status (0 when unreadable). Local.
void read_memory(std::int64_t& rss_bytes, std::int64_t& peak_rss_bytes);

}  // namespace hpctrain::runtime
