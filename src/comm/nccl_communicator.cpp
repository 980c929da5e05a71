#include "hpctrain/comm/nccl_communicator.hpp"

#include "hpctrain/build_config.hpp"
#include "hpctrain/runtime/abort_hooks.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"

#if HPCTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>
#endif

namespace hpctrain::comm {

#if HPCTRAIN_HAVE_NCCL
namespace {

#define HPCTRAIN_CUDA_CHECK(call)                                                                 \
  do {                                                                                            \
    cudaError_t hpctrain_cuda_rc_ = (call);                                                       \
    if (hpctrain_cuda_rc_ != cudaSuccess)                                                         \
      throw CommError(str("CUDA call failed: ", #call, " returned ",                              \
                          cudaGetErrorString(hpctrain_cuda_rc_), " at ", __FILE__, ":", __LINE__, \
                          ". Check the GPU allocation (nvidia-smi, --gpus)."));                   \
  } while (0)

#define HPCTRAIN_NCCL_CHECK(call)                                                                 \
  do {                                                                                            \
    ncclResult_t hpctrain_nccl_rc_ = (call);                                                      \
    if (hpctrain_nccl_rc_ != ncclSuccess)                                                         \
      throw CommError(str("NCCL call failed: ", #call, " returned ",                              \
                          ncclGetErrorString(hpctrain_nccl_rc_), " at ", __FILE__, ":", __LINE__, \
                          ". Run with NCCL_DEBUG=INFO for the transport details."));              \
  } while (0)

ncclDataType_t nccl_type(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return ncclFloat32;
    case c10::kDouble: return ncclFloat64;
    case c10::kHalf: return ncclFloat16;
    case c10::kBFloat16: return ncclBfloat16;
    case c10::kInt: return ncclInt32;
    case c10::kLong: return ncclInt64;
    case c10::kChar: return ncclInt8;
    case c10::kByte: return ncclUint8;
    case c10::kBool: return ncclUint8;
    default:
      throw CommError(
          str("dtype ", c10::toString(t), " is not supported by the NCCL communicator"));
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

// Completion of an NCCL operation is an event on the communicator's stream. wait() orders the
// default stream after it (no host blocking), like LibTorch's ProcessGroupNCCL work objects.
class NcclWork final : public Work {
 public:
  explicit NcclWork(cudaEvent_t event) : event_(event) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  void wait() override { HPCTRAIN_CUDA_CHECK(cudaStreamWaitEvent(nullptr, event_, 0)); }
  bool done() override { return cudaEventQuery(event_) == cudaSuccess; }
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm mpi_comm, std::string name, int cuda_index)
      : mpi_comm_(mpi_comm), name_(std::move(name)), cuda_index_(cuda_index) {
    HPCTRAIN_MPI_CHECK(MPI_Comm_rank(mpi_comm_, &rank_));
    HPCTRAIN_MPI_CHECK(MPI_Comm_size(mpi_comm_, &size_));
    HPCTRAIN_CUDA_CHECK(cudaSetDevice(cuda_index_));
    ncclUniqueId id;
    if (rank_ == 0) HPCTRAIN_NCCL_CHECK(ncclGetUniqueId(&id));
    // The unique id is opaque bytes; MPI carries it to the rest of the group.
    HPCTRAIN_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_comm_));
    HPCTRAIN_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    HPCTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // The watchdog's abort (a collective past its deadline, a lost peer) must not wait for NCCL
    // kernels that will never finish: ncclCommAbort cancels them, as ProcessGroupNCCL does.
    abort_hook_ = runtime::add_abort_hook([comm = comm_] { ncclCommAbort(comm); });
  }
  ~NcclCommunicator() override {
    runtime::remove_abort_hook(abort_hook_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override {
    all_reduce_async(tensor, op)->wait();
  }

  WorkHandle all_reduce_async(torch::Tensor tensor, ReduceOp op) override {
    check(tensor, "all_reduce");
    torch::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    enter();
    HPCTRAIN_NCCL_CHECK(ncclAllReduce(work.data_ptr(), work.data_ptr(),
                                      static_cast<size_t>(work.numel()),
                                      nccl_type(work.scalar_type()), nccl_op(op), comm_, stream_));
    auto handle = leave();
    if (!work.is_same(tensor)) {
      handle->wait();
      tensor.copy_(work);
    }
    return handle;
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    torch::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    enter();
    HPCTRAIN_NCCL_CHECK(ncclBroadcast(work.data_ptr(), work.data_ptr(),
                                      static_cast<size_t>(work.numel()),
                                      nccl_type(work.scalar_type()), root, comm_, stream_));
    leave()->wait();
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  torch::Tensor all_gather(const torch::Tensor& tensor) override {
    check(tensor, "all_gather");
    torch::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape = input.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size_;
    torch::Tensor output = torch::empty(shape, input.options());
    enter();
    HPCTRAIN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(),
                                      static_cast<size_t>(input.numel()),
                                      nccl_type(input.scalar_type()), comm_, stream_));
    leave()->wait();
    return output;
  }

  torch::Tensor reduce_scatter(const torch::Tensor& tensor, ReduceOp op) override {
    check(tensor, "reduce_scatter");
    if (tensor.dim() == 0 || tensor.size(0) % size_ != 0) {
      throw CommError(str("reduce_scatter on group ", name_, ": dim 0 of shape ", tensor.sizes(),
                          " must be divisible by the group size ", size_));
    }
    torch::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] /= size_;
    torch::Tensor output = torch::empty(shape, input.options());
    enter();
    HPCTRAIN_NCCL_CHECK(
        ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                          nccl_type(input.scalar_type()), nccl_op(op), comm_, stream_));
    leave()->wait();
    return output;
  }

  // NCCL's in-place forms: recvbuff = sendbuff + rank * count.
  WorkHandle reduce_scatter_in_place_async(torch::Tensor buffer, ReduceOp op) override {
    const auto chunk = in_place_chunk(buffer, "reduce_scatter");
    auto* base = static_cast<char*>(buffer.data_ptr());
    enter();
    HPCTRAIN_NCCL_CHECK(ncclReduceScatter(
        base, base + rank_ * chunk * buffer.element_size(), static_cast<size_t>(chunk),
        nccl_type(buffer.scalar_type()), nccl_op(op), comm_, stream_));
    return leave();
  }

  WorkHandle all_gather_in_place_async(torch::Tensor buffer) override {
    const auto chunk = in_place_chunk(buffer, "all_gather");
    auto* base = static_cast<char*>(buffer.data_ptr());
    enter();
    HPCTRAIN_NCCL_CHECK(ncclAllGather(base + rank_ * chunk * buffer.element_size(), base,
                                      static_cast<size_t>(chunk), nccl_type(buffer.scalar_type()),
                                      comm_, stream_));
    return leave();
  }

  void barrier() override {
    // A one-element all-reduce, then block the host until it completes, polling NCCL's async
    // error state so a failed peer turns into an error instead of a hang.
    auto flag = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, cuda_index_));
    all_reduce(flag, ReduceOp::kSum);
    runtime::Watchdog::Scope watch("barrier", name_.c_str(), 0);
    while (cudaStreamQuery(stream_) == cudaErrorNotReady) {
      ncclResult_t async_error = ncclSuccess;
      HPCTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async_error));
      HPCTRAIN_NCCL_CHECK(async_error);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    HPCTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void wait_all() override {
    if (last_) last_->wait();
  }

 private:
  void check(const torch::Tensor& t, const char* operation) const {
    if (!t.defined() || !t.is_cuda()) {
      throw CommError(str(operation, " on group ", name_, ": the NCCL backend takes CUDA tensors",
                          t.defined() ? str(", got ", t.device().str()) : std::string()));
    }
  }
  std::int64_t in_place_chunk(const torch::Tensor& buffer, const char* operation) const {
    check(buffer, operation);
    if (!buffer.is_contiguous() || buffer.numel() % size_ != 0) {
      throw CommError(str(operation, " on group ", name_,
                          ": the buffer must be contiguous with a number of elements divisible "
                          "by the group size ",
                          size_, ", got ", buffer.numel(),
                          "; pad it to a multiple of the group size"));
    }
    return buffer.numel() / size_;
  }
  // Orders the communicator's stream after the work queued so far on the default stream.
  void enter() {
    cudaEvent_t ready;
    HPCTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(ready, nullptr));
    HPCTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
  }
  std::shared_ptr<NcclWork> leave() {
    cudaEvent_t done;
    HPCTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(done, stream_));
    auto work = std::make_shared<NcclWork>(done);
    last_ = work;
    return work;
  }

  MPI_Comm mpi_comm_;
  std::string name_;
  int cuda_index_;
  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<NcclWork> last_;
  int abort_hook_ = -1;
};

}  // namespace

bool nccl_compiled() {
  return true;
}

bool cuda_runtime_has_device() {
  int count = 0;
  // Without a driver this returns cudaErrorInsufficientDriver (35): that means "no GPU here".
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "unavailable";
  // Since 2.9 the code is major*10000 + minor*100 + patch.
  return code >= 10000 ? str(code / 10000, ".", (code / 100) % 100, ".", code % 100)
                       : str(code / 1000, ".", (code / 100) % 10, ".", code % 100);
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, std::string name,
                                                     int cuda_index) {
  if (!cuda_runtime_has_device()) {
    throw CommError(
        "the NCCL backend needs a CUDA device, and the CUDA runtime sees none here; "
        "use --comm-backend mpi or run on a GPU node");
  }
  return std::make_unique<NcclCommunicator>(comm, std::move(name), cuda_index);
}

#else  // !HPCTRAIN_HAVE_NCCL

bool nccl_compiled() {
  return false;
}
bool cuda_runtime_has_device() {
  return false;
}
std::string nccl_version() {
  return "not built";
}

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, std::string, int) {
  throw CommError(
      "this hpctrain was built without NCCL: reconfigure with the CUDA toolkit and "
      "NCCL available (-DHPCTRAIN_WITH_NCCL=ON, CUDAToolkit_ROOT, NCCL_ROOT)");
}

#endif

}  // namespace hpctrain::comm
