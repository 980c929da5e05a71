#include "hpctrain/comm/nccl_communicator.hpp"

#include "hpctrain/build_config.hpp"
#include "hpctrain/runtime/abort_hooks.hpp"
#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"

#if HPCTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/trace.hpp"
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

// The communicator's handle, shared with its work objects and the abort hook: whichever of the
// hook and the destructor takes it first ends the communicator; afterwards it is nullptr.
using CommOwner = std::shared_ptr<std::atomic<ncclComm_t>>;

// Throws CommError when NCCL has recorded an asynchronous error on the communicator (a peer that
// died, a network failure, a communicator aborted): the operations queued on it will never
// complete, so the caller must not go on queueing or waiting. ncclCommGetAsyncError does not
// block; it reads the state NCCL's proxy thread keeps.
void check_async_error(const CommOwner& owner, const std::string& group, const char* where) {
  ncclComm_t comm = owner->load();
  if (comm == nullptr) {
    throw CommError(str(where, " on group ", group,
                        ": the NCCL communicator was aborted (another rank failed or the "
                        "collective watchdog ended the job)"));
  }
  ncclResult_t async_error = ncclSuccess;
  HPCTRAIN_NCCL_CHECK(ncclCommGetAsyncError(comm, &async_error));
  if (async_error == ncclSuccess) return;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
  if (async_error == ncclInProgress) return;  // a non-blocking communicator still initialising
#endif
  std::string detail;
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  if (const char* last = ncclGetLastError(comm); last != nullptr && last[0] != '\0') {
    detail = str(" (", last, ")");
  }
#endif
  throw CommError(str(where, " on group ", group, ": NCCL reported an asynchronous error: ",
                      ncclGetErrorString(async_error), detail,
                      ". A peer rank failed or the network between the GPUs broke; run with "
                      "NCCL_DEBUG=INFO for the transport details"));
}

// Completion of an NCCL operation is an event on the communicator's stream. wait() orders the
// default stream after it (no host blocking), like LibTorch's ProcessGroupNCCL work objects, after
// checking the communicator's asynchronous error state: an operation whose communicator failed
// is an error here (communicator.hpp: wait() rethrows the collective's error), not a stream that
// waits forever.
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t event, CommOwner owner, const std::string* group, const char* op)
      : event_(event), owner_(std::move(owner)), group_(group), op_(op) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  void wait() override {
    check_async_error(owner_, *group_, op_);
    HPCTRAIN_CUDA_CHECK(cudaStreamWaitEvent(nullptr, event_, 0));
  }
  bool done() override {
    if (cudaEventQuery(event_) == cudaSuccess) return true;
    check_async_error(owner_, *group_, op_);
    return false;
  }
  /// The completion event has fired (no error check: for the communicator's own bookkeeping).
  bool fired() const { return cudaEventQuery(event_) == cudaSuccess; }

 private:
  cudaEvent_t event_;
  CommOwner owner_;
  const std::string* group_;  // the communicator's name; the communicator outlives its work
  const char* op_;            // string literal
};

// logging.trace on the GPU: a collective's slice on the communication lane runs from its launch
// (the host call) to its completion on the communicator's stream. The completion is known only on
// the device, so while a window is open each collective records two timing events on the stream
// (when the stream reached it: after earlier collectives and the default stream's work it waits
// for; and when it finished), and nothing waits for them then. When the window closes, resolve()
// waits once for the last of them, records a reference event on the then idle stream, reads the
// host clock around it, and moves every event onto the host's steady clock by its elapsed time
// to the reference. So the timeline costs no synchronisation per bucket.
class StreamTimeline final : public runtime::trace::DeferredSource {
 public:
  StreamTimeline(const std::string& group, cudaStream_t stream, int cuda_index)
      : group_(group), stream_(stream), cuda_index_(cuda_index) {
    lane_ = runtime::trace::lane("comm " + group);
    runtime::trace::add_source(this);
  }
  ~StreamTimeline() override {
    runtime::trace::remove_source(this);
    discard();
  }
  StreamTimeline(const StreamTimeline&) = delete;
  StreamTimeline& operator=(const StreamTimeline&) = delete;

  // A collective about to be enqueued: with the window open, the start event recorded on the
  // stream (after its wait for the default stream); otherwise, or if CUDA refused, untraced.
  struct Pending {
    const char* name = "";
    std::int64_t bytes = -1;
    std::int64_t launch_ns = 0;  // host steady clock at the call
    cudaEvent_t start = nullptr;
  };
  Pending begin(const char* name, std::int64_t bytes) {
    Pending p;
    if (!runtime::trace::on()) return p;
    p = Pending{name, bytes, runtime::trace::to_ns(runtime::trace::Clock::now()), nullptr};
    if (cudaEventCreate(&p.start) != cudaSuccess) {
      p.start = nullptr;
    } else if (cudaEventRecord(p.start, stream_) != cudaSuccess) {
      cudaEventDestroy(p.start);
      p.start = nullptr;
    }
    return p;
  }
  // The collective of `p` is enqueued: records its end event and keeps both for resolve().
  void end(const Pending& p) {
    if (p.start == nullptr) return;
    cudaEvent_t done = nullptr;
    if (cudaEventCreate(&done) != cudaSuccess || cudaEventRecord(done, stream_) != cudaSuccess) {
      if (done) cudaEventDestroy(done);
      cudaEventDestroy(p.start);
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ops_.push_back(Op{p.name, p.bytes, p.launch_ns, p.start, done});
  }

  void resolve(std::vector<runtime::trace::Slice>& out) override {
    std::vector<Op> ops;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops.swap(ops_);
    }
    if (ops.empty()) return;
    const std::string problem = place(ops, out);
    if (!problem.empty()) {
      log::rank_warn(str("trace: the collectives of group ", group_,
                         " on the GPU are left out of trace.json: ", problem));
    }
    release(ops);
  }

  void discard() override {
    std::vector<Op> ops;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ops.swap(ops_);
    }
    release(ops);  // CUDA releases an event still pending once it completes
  }

 private:
  struct Op {
    const char* name;
    std::int64_t bytes;
    std::int64_t launch_ns;  // host steady clock at the call
    cudaEvent_t start;
    cudaEvent_t end;
  };

  // Appends the slices of `ops` to `out`; returns what went wrong, or "" (then all were placed).
  std::string place(const std::vector<Op>& ops, std::vector<runtime::trace::Slice>& out) {
    namespace trace = runtime::trace;
    if (cudaSetDevice(cuda_index_) != cudaSuccess) return "cudaSetDevice failed";
    cudaError_t rc = cudaStreamSynchronize(stream_);
    if (rc != cudaSuccess) return str("waiting for the stream: ", cudaGetErrorString(rc));
    cudaEvent_t reference = nullptr;
    if (cudaEventCreate(&reference) != cudaSuccess) return "cudaEventCreate failed";
    // The stream is idle: the reference fires as soon as it is queued, between the two readings.
    const std::int64_t before = trace::to_ns(trace::Clock::now());
    rc = cudaEventRecord(reference, stream_);
    if (rc == cudaSuccess) rc = cudaEventSynchronize(reference);
    const std::int64_t after = trace::to_ns(trace::Clock::now());
    const double reference_ns = 0.5 * static_cast<double>(before + after);
    std::vector<trace::DeviceTiming> timings;
    timings.reserve(ops.size());
    for (const Op& op : ops) {
      if (rc != cudaSuccess) break;
      float start_ms = 0, end_ms = 0;
      rc = cudaEventElapsedTime(&start_ms, op.start, reference);
      if (rc == cudaSuccess) rc = cudaEventElapsedTime(&end_ms, op.end, reference);
      timings.push_back(trace::DeviceTiming{op.name, op.bytes, op.launch_ns, start_ms, end_ms});
    }
    cudaEventDestroy(reference);
    if (rc != cudaSuccess) return cudaGetErrorString(rc);
    const std::vector<trace::Slice> placed =
        trace::place_device_timings(lane_, timings, reference_ns);
    out.insert(out.end(), placed.begin(), placed.end());
    return "";
  }

  static void release(const std::vector<Op>& ops) {
    for (const Op& op : ops) {
      if (op.start) cudaEventDestroy(op.start);
      if (op.end) cudaEventDestroy(op.end);
    }
  }

  std::string group_;
  cudaStream_t stream_;
  int cuda_index_;
  int lane_ = 0;
  std::mutex mutex_;  // the autograd engine's device thread issues collectives during backward
  std::vector<Op> ops_;
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
    timeline_ = std::make_unique<StreamTimeline>(name_, stream_, cuda_index_);
    channel_ = runtime::channel(name_, "", mpi_comm_);
    // The watchdog's abort (a collective past its deadline, a lost peer) must not wait for NCCL
    // kernels that will never finish: ncclCommAbort cancels them, as ProcessGroupNCCL does.
    // The hook and the destructor may run on different threads: whichever takes the handle
    // first ends the communicator (abort or destroy), the other finds nothing to end. Destroying
    // an aborted communicator would free it twice.
    owner_->store(comm_);
    abort_hook_ = runtime::add_abort_hook([owner = owner_] {
      if (ncclComm_t comm = owner->exchange(nullptr)) ncclCommAbort(comm);
    });
  }
  ~NcclCommunicator() override {
    runtime::remove_abort_hook(abort_hook_);
    timeline_.reset();  // before the stream goes
    for (const InFlight& f : inflight_) destroy(f.times);
    if (anchor_) cudaEventDestroy(anchor_);
    ncclComm_t comm = owner_->exchange(nullptr);
    if (comm && stream_) cudaStreamSynchronize(stream_);  // aborted: its kernels never finish
    if (comm) ncclCommDestroy(comm);
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
    const auto traced = enter("all_reduce", work);
    HPCTRAIN_NCCL_CHECK(ncclAllReduce(work.data_ptr(), work.data_ptr(),
                                      static_cast<size_t>(work.numel()),
                                      nccl_type(work.scalar_type()), nccl_op(op), comm_, stream_));
    auto handle = leave(traced, "all_reduce");
    if (!work.is_same(tensor)) {
      handle->wait();
      tensor.copy_(work);
    }
    return handle;
  }

  void broadcast(torch::Tensor& tensor, int root) override {
    check(tensor, "broadcast");
    torch::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
    const auto traced = enter("broadcast", work);
    HPCTRAIN_NCCL_CHECK(ncclBroadcast(work.data_ptr(), work.data_ptr(),
                                      static_cast<size_t>(work.numel()),
                                      nccl_type(work.scalar_type()), root, comm_, stream_));
    leave(traced, "broadcast")->wait();
    if (!work.is_same(tensor)) tensor.copy_(work);
  }

  torch::Tensor all_gather(const torch::Tensor& tensor) override {
    check(tensor, "all_gather");
    torch::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape = input.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size_;
    torch::Tensor output = torch::empty(shape, input.options());
    const auto traced = enter("all_gather", output);
    HPCTRAIN_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(),
                                      static_cast<size_t>(input.numel()),
                                      nccl_type(input.scalar_type()), comm_, stream_));
    leave(traced, "all_gather")->wait();
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
    const auto traced = enter("reduce_scatter", input);
    HPCTRAIN_NCCL_CHECK(
        ncclReduceScatter(input.data_ptr(), output.data_ptr(), static_cast<size_t>(output.numel()),
                          nccl_type(input.scalar_type()), nccl_op(op), comm_, stream_));
    leave(traced, "reduce_scatter")->wait();
    return output;
  }

  // NCCL's in-place forms: recvbuff = sendbuff + rank * count.
  WorkHandle reduce_scatter_in_place_async(torch::Tensor buffer, ReduceOp op) override {
    const auto chunk = in_place_chunk(buffer, "reduce_scatter");
    auto* base = static_cast<char*>(buffer.data_ptr());
    const auto traced = enter("reduce_scatter", buffer);
    HPCTRAIN_NCCL_CHECK(ncclReduceScatter(
        base, base + rank_ * chunk * buffer.element_size(), static_cast<size_t>(chunk),
        nccl_type(buffer.scalar_type()), nccl_op(op), comm_, stream_));
    return leave(traced, "reduce_scatter");
  }

  WorkHandle all_gather_in_place_async(torch::Tensor buffer) override {
    const auto chunk = in_place_chunk(buffer, "all_gather");
    auto* base = static_cast<char*>(buffer.data_ptr());
    const auto traced = enter("all_gather", buffer);
    HPCTRAIN_NCCL_CHECK(ncclAllGather(base + rank_ * chunk * buffer.element_size(), base,
                                      static_cast<size_t>(chunk), nccl_type(buffer.scalar_type()),
                                      comm_, stream_));
    return leave(traced, "all_gather");
  }

  void barrier() override {
    // A one-element all-reduce, then block the host until it completes, polling NCCL's async
    // error state so a failed peer turns into an error instead of a hang.
    auto flag = torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, cuda_index_));
    all_reduce(flag, ReduceOp::kSum);
    runtime::Watchdog::Scope watch("barrier", name_.c_str(), 0, channel_, numbered_.load());
    while (cudaStreamQuery(stream_) == cudaErrorNotReady) {
      check_async_error(owner_, name_, "barrier");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    HPCTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void wait_all() override {
    if (last_) last_->wait();
  }

  // One NCCL group of sends and receives on the communicator's stream: NCCL matches the messages
  // between two ranks in the order they are posted, and the group lets a rank send to and
  // receive from its neighbours at once without either waiting for the other. Recorded in the
  // flight recorder like the collectives, not numbered on the group's channel (only the pair
  // takes part: runtime/collective_scope.hpp).
  WorkHandle send_recv_async(std::vector<P2PMessage> batch) override {
    std::int64_t bytes = 0;
    std::string peers;
    std::vector<int> world_peers;
    for (const P2PMessage& m : batch) {
      const bool send = m.kind == P2PMessage::Kind::kSend;
      const char* what = send ? "send" : "recv";
      check(m.tensor, what);
      if (m.peer < 0 || m.peer >= size_ || m.peer == rank_) {
        throw CommError(str(what, " on group ", name_, ": peer ", m.peer,
                            " is not another rank of the group (ranks 0..", size_ - 1,
                            ", this one ", rank_, ")"));
      }
      if (!m.tensor.is_contiguous()) {
        throw CommError(str(what, " on group ", name_, ": the tensor must be contiguous"));
      }
      bytes += static_cast<std::int64_t>(m.tensor.numel()) * m.tensor.element_size();
      const int world = channel_ ? channel_->members()[static_cast<std::size_t>(m.peer)] : -1;
      if (world >= 0) world_peers.push_back(world);
      peers += str(peers.empty() ? "" : ", ", send ? "send to" : "recv from", " group rank ",
                   m.peer, world >= 0 ? str(" = world rank ", world) : std::string());
    }
    if (batch.empty()) return leave(Entered{}, "send_recv");
    Entered entered =
        enter_bytes("send_recv", bytes, c10::toString(batch.front().tensor.scalar_type()), nullptr);
    entered.issued.detail = std::move(peers);
    entered.issued.peers = std::move(world_peers);
    HPCTRAIN_NCCL_CHECK(ncclGroupStart());
    for (const P2PMessage& m : batch) {
      // As bytes: the two sides agree on sizes, not on how the bytes are typed.
      const auto count = static_cast<size_t>(m.tensor.numel() * m.tensor.element_size());
      if (m.kind == P2PMessage::Kind::kSend) {
        HPCTRAIN_NCCL_CHECK(
            ncclSend(m.tensor.data_ptr(), count, ncclUint8, m.peer, comm_, stream_));
      } else {
        HPCTRAIN_NCCL_CHECK(
            ncclRecv(m.tensor.data_ptr(), count, ncclUint8, m.peer, comm_, stream_));
      }
    }
    HPCTRAIN_NCCL_CHECK(ncclGroupEnd());
    return leave(entered, "send_recv");
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
  // Orders the communicator's stream after the work queued so far on the default stream; with a
  // trace window open, marks where the collective `name` on `buffer` starts on the stream, for
  // leave().
  //
  // The collective is numbered on the group's channel and recorded in the flight recorder here:
  // on a GPU "entered" means queued by the host; it counts as completed once the host sees its
  // completion event fired (checked, without waiting, at each later collective).
  //
  // With the flight recorder on, a collective also records two CUDA timing events on the stream
  // (where the stream reaches it, and where it finished); once the host sees it completed, their
  // elapsed times to an anchor event, recorded on the idle stream at the communicator's first
  // collective with the host clock read around it, become the record's start and end on the
  // host's steady clock. Nothing waits for them. (cudaEventElapsedTime is a float of ms: after
  // ten hours the times are good to a few milliseconds.)
  struct DeviceTimes {
    cudaEvent_t started = nullptr;
    cudaEvent_t ended = nullptr;
  };
  struct Entered {
    StreamTimeline::Pending traced;
    runtime::IssuedOp issued;
    DeviceTimes times;
  };
  // A timing event recorded on the stream now (nullptr when the flight recorder is off).
  cudaEvent_t timing_event(std::int64_t record) {
    if (record < 0) return nullptr;
    cudaEvent_t event;
    HPCTRAIN_CUDA_CHECK(cudaEventCreate(&event));
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(event, stream_));
    return event;
  }
  // The anchor on the idle stream and the host time it fired at: recorded once. Host thread.
  void anchor() {
    if (anchor_) return;
    HPCTRAIN_CUDA_CHECK(cudaEventCreate(&anchor_));
    const auto before = std::chrono::steady_clock::now();
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(anchor_, stream_));
    HPCTRAIN_CUDA_CHECK(cudaEventSynchronize(anchor_));
    const auto after = std::chrono::steady_clock::now();
    anchor_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                     (before.time_since_epoch() + after.time_since_epoch()) / 2)
                     .count();
  }
  // Steady-clock nanoseconds of a fired timing event (-1 when it cannot be read).
  std::int64_t device_ns(cudaEvent_t event) const {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, anchor_, event) != cudaSuccess) return -1;
    return anchor_ns_ + static_cast<std::int64_t>(static_cast<double>(ms) * 1e6);
  }
  Entered enter(const char* name, const torch::Tensor& buffer) {
    return enter_bytes(name, static_cast<std::int64_t>(buffer.numel()) * buffer.element_size(),
                       c10::toString(buffer.scalar_type()), channel_);
  }
  // The same for `bytes` of `dtype`, numbered on `channel` (nullptr: a point-to-point batch).
  Entered enter_bytes(const char* name, std::int64_t bytes, const char* dtype,
                      runtime::Channel* channel) {
    if (size_ > 1 && runtime::FlightRecorder::capacity() > 0) anchor();  // the stream is idle
    cudaEvent_t ready;
    HPCTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(ready, nullptr));
    HPCTRAIN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    if (size_ == 1) return {};  // nothing travels: no communication to show
    reap();
    Entered e;
    e.issued =
        runtime::issue_op(channel, name, name_.c_str(), static_cast<std::size_t>(bytes), dtype);
    if (channel) channel->enter(e.issued.seq, name);
    runtime::FlightRecorder::record_start(e.issued.record);
    e.times.started = timing_event(e.issued.record);
    if (channel) numbered_.store(e.issued.seq);
    e.traced = timeline_->begin(name, bytes);
    return e;
  }
  std::shared_ptr<NcclWork> leave(const Entered& entered, const char* op) {
    timeline_->end(entered.traced);
    cudaEvent_t done;
    HPCTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    HPCTRAIN_CUDA_CHECK(cudaEventRecord(done, stream_));
    DeviceTimes times = entered.times;
    if (times.started) times.ended = timing_event(entered.issued.record);
    auto work = std::make_shared<NcclWork>(done, owner_, &name_, op);
    last_ = work;
    if (entered.issued.seq > 0 || entered.issued.record >= 0) {  // numbered, or recorded
      std::lock_guard<std::mutex> lock(inflight_mutex_);
      inflight_.push_back({entered.issued, work, times});
    } else {
      destroy(times);
    }
    return work;
  }
  // Marks the collectives whose completion event fired as completed, oldest first.
  void reap() {
    std::lock_guard<std::mutex> lock(inflight_mutex_);
    while (!inflight_.empty() && inflight_.front().work->fired()) {
      const InFlight& f = inflight_.front();
      const runtime::IssuedOp& op = f.issued;
      if (op.channel) op.channel->complete(op.seq, op.op);
      runtime::FlightRecorder::record_end(op.record, true);
      if (f.times.started && f.times.ended) {
        const std::int64_t start = device_ns(f.times.started);
        const std::int64_t end = device_ns(f.times.ended);
        if (start >= 0 && end >= start) {
          runtime::FlightRecorder::record_device_times(op.record, start, end);
        }
      }
      destroy(f.times);
      inflight_.pop_front();
    }
  }
  static void destroy(const DeviceTimes& times) {
    if (times.started) cudaEventDestroy(times.started);
    if (times.ended) cudaEventDestroy(times.ended);
  }
  struct InFlight {
    runtime::IssuedOp issued;
    std::shared_ptr<NcclWork> work;
    DeviceTimes times;
  };

  MPI_Comm mpi_comm_;
  std::string name_;
  int cuda_index_;
  int rank_ = 0;
  int size_ = 1;
  ncclComm_t comm_ = nullptr;
  CommOwner owner_ = std::make_shared<std::atomic<ncclComm_t>>();
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<StreamTimeline> timeline_;
  std::shared_ptr<NcclWork> last_;
  int abort_hook_ = -1;
  runtime::Channel* channel_ = nullptr;
  std::atomic<std::uint64_t> numbered_{0};  // the last number issued (the barrier's watchdog)
  std::mutex inflight_mutex_;
  std::deque<InFlight> inflight_;
  cudaEvent_t anchor_ = nullptr;  // the device times' reference (flight records)
  std::int64_t anchor_ns_ = 0;
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
