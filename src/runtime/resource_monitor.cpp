#include "hpctrain/runtime/resource_monitor.hpp"

#include <dlfcn.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {

void read_memory(std::int64_t& rss_bytes, std::int64_t& peak_rss_bytes) {
  rss_bytes = 0;
  peak_rss_bytes = 0;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kib = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) rss_bytes = kib * 1024;
    if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) peak_rss_bytes = kib * 1024;
  }
  std::fclose(f);
}

// The few NVML entry points used, declared here with NVML's C ABI (nvml.h is not needed to build).
struct ResourceMonitor::Nvml {
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  struct Memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };
  using Init = int (*)();
  using Shutdown = int (*)();
  using HandleByIndex = int (*)(unsigned int, void**);
  using GetUtilization = int (*)(void*, Utilization*);
  using GetMemory = int (*)(void*, Memory*);
  void* library = nullptr;
  Shutdown shutdown = nullptr;
  GetUtilization utilization = nullptr;
  GetMemory memory = nullptr;
  void* device = nullptr;
};

namespace {

// Says once per process why device fields are missing (every monitor would say the same).
void say_once(const std::string& why) {
  static bool said = false;
  if (said) return;
  said = true;
  log::info(str("resource monitor: ", why,
                ": device utilisation and memory are not recorded (CPU and host memory are)"));
}

}  // namespace

ResourceMonitor::ResourceMonitor(int cuda_index)
    : wall_(std::chrono::steady_clock::now()), cpu_(cpu_seconds()) {
  if (cuda_index < 0) return;
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    say_once(str("libnvidia-ml.so.1 not loaded (", ::dlerror(), ")"));
    return;
  }
  auto init = reinterpret_cast<Nvml::Init>(::dlsym(lib, "nvmlInit_v2"));
  auto by_index =
      reinterpret_cast<Nvml::HandleByIndex>(::dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
  auto nvml = new Nvml;
  nvml->library = lib;
  nvml->shutdown = reinterpret_cast<Nvml::Shutdown>(::dlsym(lib, "nvmlShutdown"));
  nvml->utilization =
      reinterpret_cast<Nvml::GetUtilization>(::dlsym(lib, "nvmlDeviceGetUtilizationRates"));
  nvml->memory = reinterpret_cast<Nvml::GetMemory>(::dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  // CUDA device indices follow CUDA_VISIBLE_DEVICES, NVML's do not; with the one-device-per-rank
  // binding of hpctrain and no CUDA_VISIBLE_DEVICES remapping they agree.
  int rc = -1;
  if (init == nullptr || by_index == nullptr || nvml->utilization == nullptr ||
      nvml->memory == nullptr) {
    say_once("libnvidia-ml.so.1 lacks the NVML functions used");
  } else if ((rc = init()) != 0) {
    say_once(str("nvmlInit failed (NVML error ", rc, ")"));
  } else if ((rc = by_index(static_cast<unsigned int>(cuda_index), &nvml->device)) != 0) {
    say_once(str("NVML has no device ", cuda_index, " (NVML error ", rc, ")"));
    if (nvml->shutdown) nvml->shutdown();
  } else {
    nvml_ = nvml;
    return;
  }
  ::dlclose(lib);
  delete nvml;
}

ResourceMonitor::~ResourceMonitor() {
  if (nvml_ == nullptr) return;
  if (nvml_->shutdown) nvml_->shutdown();
  ::dlclose(nvml_->library);
  delete nvml_;
}

double ResourceMonitor::cpu_seconds() const {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

ResourceSample ResourceMonitor::sample() {
  ResourceSample s;
  const auto now = std::chrono::steady_clock::now();
  const double cpu = cpu_seconds();
  const double wall = std::chrono::duration<double>(now - wall_).count();
  s.cpu_percent = wall > 0 ? 100.0 * (cpu - cpu_) / wall : 0;
  wall_ = now;
  cpu_ = cpu;
  read_memory(s.rss_bytes, s.peak_rss_bytes);
  if (nvml_ != nullptr) {
    Nvml::Utilization u{};
    Nvml::Memory m{};
    if (nvml_->utilization(nvml_->device, &u) == 0) s.device_util_percent = u.gpu;
    if (nvml_->memory(nvml_->device, &m) == 0) {
      s.device_memory_bytes = static_cast<std::int64_t>(m.used);
    }
  }
  peak_device_ = std::max(peak_device_, s.device_memory_bytes);
  last_ = s;
  return s;
}

}  // namespace hpctrain::runtime
