#include "hpctrain/comm/device_copy.hpp"

#include <vector>

#include "hpctrain/build_config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

#if HPCTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace hpctrain::comm {

#if HPCTRAIN_HAVE_NCCL

namespace {
void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) {
    throw CommError(str("input copy to the GPU: ", what, " failed: ", cudaGetErrorString(rc)));
  }
}
}  // namespace

struct DeviceCopier::Stream {
  int index = 0;
  cudaStream_t stream = nullptr;
  std::vector<torch::Tensor> sources;  ///< host tensors of copies since the last ready()
};

bool DeviceCopier::available() {
  return true;
}

DeviceCopier::DeviceCopier(torch::Device device) : stream_(std::make_unique<Stream>()) {
  stream_->index = device.has_index() ? device.index() : 0;
  check(cudaSetDevice(stream_->index), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&stream_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
}

DeviceCopier::~DeviceCopier() {
  if (stream_ && stream_->stream) {
    cudaStreamSynchronize(stream_->stream);
    cudaStreamDestroy(stream_->stream);
  }
}

torch::Tensor DeviceCopier::start(const torch::Tensor& host) {
  check(cudaSetDevice(stream_->index), "cudaSetDevice");  // the reader thread's device
  torch::Tensor src = host.is_contiguous() ? host : host.contiguous();
  // Allocated for the default stream, which uses it after wait(); the batch keeps it alive
  // until then. The allocator may have handed out a block that work already queued on the
  // default stream still uses: the copy stream first waits for that work, so the copy overlaps
  // the compute queued after it (the next steps), not what came before.
  torch::Tensor dst = torch::empty(
      src.sizes(), src.options().device(torch::kCUDA, stream_->index).pinned_memory(false));
  const auto bytes = static_cast<size_t>(src.numel()) * src.element_size();
  if (bytes > 0) {
    cudaEvent_t queued = nullptr;
    check(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(queued, nullptr), "cudaEventRecord");
    check(cudaStreamWaitEvent(stream_->stream, queued, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(queued);
    check(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice,
                          stream_->stream),
          "cudaMemcpyAsync");
  }
  stream_->sources.push_back(src);  // pinned memory the copy reads: alive until ready's end
  return dst;
}

std::shared_ptr<void> DeviceCopier::ready() {
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
  check(cudaEventRecord(event, stream_->stream), "cudaEventRecord");
  // The host buffers may be reused only after the copies have read them (LibTorch's pinned
  // allocator does not know this stream): the marker holds them, and its end waits for the
  // event, which by then (the batch's step is queued) has normally long passed.
  std::vector<torch::Tensor> sources;
  sources.swap(stream_->sources);
  return std::shared_ptr<void>(event, [sources = std::move(sources)](void* e) {
    cudaEventSynchronize(static_cast<cudaEvent_t>(e));
    cudaEventDestroy(static_cast<cudaEvent_t>(e));
  });
}

void DeviceCopier::wait(const std::shared_ptr<void>& marker) {
  if (!marker) return;
  check(cudaStreamWaitEvent(nullptr, static_cast<cudaEvent_t>(marker.get()), 0),
        "cudaStreamWaitEvent");
}

#else  // !HPCTRAIN_HAVE_NCCL: no CUDA runtime in this build

struct DeviceCopier::Stream {};

bool DeviceCopier::available() {
  return false;
}
DeviceCopier::DeviceCopier(torch::Device) {
  throw CommError("this hpctrain was built without the CUDA runtime: no copy stream");
}
DeviceCopier::~DeviceCopier() = default;
torch::Tensor DeviceCopier::start(const torch::Tensor& host) {
  return host;
}
std::shared_ptr<void> DeviceCopier::ready() {
  return nullptr;
}
void DeviceCopier::wait(const std::shared_ptr<void>&) {}

#endif

}  // namespace hpctrain::comm
