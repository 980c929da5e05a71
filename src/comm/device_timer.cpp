#include "hpctrain/comm/device_timer.hpp"

#include <torch/cuda.h>

#include "hpctrain/build_config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

#if HPCTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace hpctrain::comm {

#if HPCTRAIN_HAVE_NCCL

// Events are recycled: a step records a handful, and creating one costs microseconds.
struct DeviceTimer::Events {
  struct Span {
    int slot;
    int from;
    int to;
  };
  std::vector<cudaEvent_t> marks;  ///< recorded since the last resolve, by mark index
  std::vector<cudaEvent_t> free;
  std::vector<Span> spans;
  ~Events() {
    for (auto e : marks) cudaEventDestroy(e);
    for (auto e : free) cudaEventDestroy(e);
  }
  static void check(cudaError_t rc, const char* what) {
    if (rc != cudaSuccess) {
      throw Error(str("device timing: ", what, " failed: ", cudaGetErrorString(rc)));
    }
  }
};

DeviceTimer::DeviceTimer(bool cuda, int cuda_index) : cuda_(cuda), cuda_index_(cuda_index) {
  if (cuda_) events_ = std::make_unique<Events>();
}

DeviceTimer::~DeviceTimer() = default;

bool DeviceTimer::uses_events() const {
  return events_ != nullptr;
}

int DeviceTimer::mark() {
  if (!events_) {
    host_marks_.push_back(Clock::now());
    return static_cast<int>(host_marks_.size()) - 1;
  }
  // An event belongs to the device current when it is created, and may be recorded only on
  // that device's streams.
  if (cuda_index_ >= 0) Events::check(cudaSetDevice(cuda_index_), "cudaSetDevice");
  cudaEvent_t e = nullptr;
  if (events_->free.empty()) {
    Events::check(cudaEventCreate(&e), "cudaEventCreate");
  } else {
    e = events_->free.back();
    events_->free.pop_back();
  }
  Events::check(cudaEventRecord(e, nullptr), "cudaEventRecord");  // the default stream
  events_->marks.push_back(e);
  return static_cast<int>(events_->marks.size()) - 1;
}

void DeviceTimer::add(int slot, int from, int to) {
  if (!events_) {
    done_[static_cast<std::size_t>(slot)] +=
        std::chrono::duration<double>(host_marks_[static_cast<std::size_t>(to)] -
                                      host_marks_[static_cast<std::size_t>(from)])
            .count();
    return;
  }
  events_->spans.push_back({slot, from, to});
}

DeviceTimer::Seconds DeviceTimer::resolve() {
  if (events_ && !events_->marks.empty()) {
    Events::check(cudaEventSynchronize(events_->marks.back()), "cudaEventSynchronize");
    for (const auto& s : events_->spans) {
      float ms = 0;
      Events::check(cudaEventElapsedTime(&ms, events_->marks[static_cast<std::size_t>(s.from)],
                                         events_->marks[static_cast<std::size_t>(s.to)]),
                    "cudaEventElapsedTime");
      done_[static_cast<std::size_t>(s.slot)] += ms / 1000.0;
    }
    events_->spans.clear();
    events_->free.insert(events_->free.end(), events_->marks.begin(), events_->marks.end());
    events_->marks.clear();
  }
  host_marks_.clear();
  Seconds out = done_;
  done_ = Seconds{};
  return out;
}

#else  // !HPCTRAIN_HAVE_NCCL: no CUDA runtime in this build

struct DeviceTimer::Events {};

DeviceTimer::DeviceTimer(bool cuda, int cuda_index) : cuda_(cuda), cuda_index_(cuda_index) {}
DeviceTimer::~DeviceTimer() = default;

bool DeviceTimer::uses_events() const {
  return false;
}

int DeviceTimer::mark() {
  if (cuda_) torch::cuda::synchronize();  // no events here: wait, then read the host clock
  host_marks_.push_back(Clock::now());
  return static_cast<int>(host_marks_.size()) - 1;
}

void DeviceTimer::add(int slot, int from, int to) {
  done_[static_cast<std::size_t>(slot)] +=
      std::chrono::duration<double>(host_marks_[static_cast<std::size_t>(to)] -
                                    host_marks_[static_cast<std::size_t>(from)])
          .count();
}

DeviceTimer::Seconds DeviceTimer::resolve() {
  host_marks_.clear();
  Seconds out = done_;
  done_ = Seconds{};
  return out;
}

#endif

}  // namespace hpctrain::comm
