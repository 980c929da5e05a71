#include "hpctrain/comm/mpi_communicator.hpp"

#include <algorithm>
#include <climits>
#include <exception>
#include <thread>
#include <vector>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "mpi_reduce_op.hpp"

namespace hpctrain::comm {
namespace {

// MPI counts are int: larger buffers go in pieces of this many elements.
constexpr std::int64_t kMaxCount = INT_MAX / 2;

bool is_half_type(c10::ScalarType t) {
  return t == c10::kBFloat16 || t == c10::kHalf;
}

bool is_integral(c10::ScalarType t) {
  return c10::isIntegralType(t, /*includeBool=*/true);
}

void check_cpu(const torch::Tensor& t, const char* operation, const std::string& group) {
  if (!t.defined()) throw CommError(str(operation, " on group ", group, ": undefined tensor"));
  if (!t.device().is_cpu()) {
    throw CommError(str(operation, " on group ", group, ": the MPI backend takes CPU tensors, got ",
                        t.device().str(), "; use the NCCL backend for CUDA tensors"));
  }
}

std::size_t byte_size(const torch::Tensor& t) {
  return static_cast<std::size_t>(t.numel()) * t.element_size();
}

// Plain in-place all-reduce on a contiguous buffer of a natively supported dtype.
void raw_all_reduce(void* data, std::int64_t count, MPI_Datatype type, int elem_bytes, MPI_Op op,
                    MPI_Comm comm) {
  auto* bytes = static_cast<char*>(data);
  for (std::int64_t offset = 0; offset < count; offset += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, count - offset));
    HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bytes + offset * elem_bytes, n, type, op, comm));
  }
}

class MpiWork final : public Work {
 public:
  void finish(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool done() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

MPI_Datatype mpi_datatype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return MPI_FLOAT;
    case c10::kDouble: return MPI_DOUBLE;
    case c10::kInt: return MPI_INT32_T;
    case c10::kLong: return MPI_INT64_T;
    case c10::kShort: return MPI_INT16_T;
    case c10::kChar: return MPI_INT8_T;
    case c10::kByte: return MPI_UINT8_T;
    case c10::kBool: return MPI_C_BOOL;
    case c10::kBFloat16:
    case c10::kHalf: return MPI_UINT16_T;  // moved as bits; reductions widen to float32
    default:
      throw CommError(str("dtype ", c10::toString(dtype),
                          " is not supported by the MPI communicator; use float32, float64, "
                          "bfloat16, float16, int8/16/32/64, uint8 or bool"));
  }
}

void MpiCommunicator::plain_mpi_all_reduce(torch::Tensor& tensor, ReduceOp op) {
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, tensor.data_ptr(),
                                   static_cast<int>(tensor.numel()),
                                   mpi_datatype(tensor.scalar_type()), mpi_op(op), comm_));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, bool async_thread)
    : comm_(comm), name_(std::move(name)), async_thread_(async_thread) {
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  trace_lane_ = runtime::trace::lane("comm " + name_);
  channel_ = runtime::channel(name_, "", comm_);
}

runtime::IssuedOp MpiCommunicator::issue(const char* op, const torch::Tensor& tensor) {
  if (size_ == 1 || !tensor.defined()) return {};
  return runtime::issue_op(channel_, op, name_.c_str(), byte_size(tensor),
                           c10::toString(tensor.scalar_type()));
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void MpiCommunicator::all_reduce_now(torch::Tensor& tensor, ReduceOp op,
                                     const runtime::IssuedOp& issued) {
  check_cpu(tensor, "all_reduce", name_);
  const auto dtype = tensor.scalar_type();
  (void)mpi_datatype(dtype);  // refuse unsupported dtypes on every group size, even 1
  if (op == ReduceOp::kAvg && is_integral(dtype)) {
    throw CommError(str("all_reduce avg on group ", name_, ": integer tensors (",
                        c10::toString(dtype),
                        ") cannot be averaged exactly; reduce with sum and "
                        "divide where the rounding is known"));
  }
  if (size_ == 1) return;  // nothing to combine; avg of one rank is itself
  runtime::CollectiveScope watch(issued);
  if (is_half_type(dtype)) {
    // Widen: each rank's contribution enters a float32 sum, rounded to 16 bits once at the end.
    torch::Tensor wide = tensor.to(torch::kFloat);
    raw_all_reduce(wide.data_ptr(), wide.numel(), MPI_FLOAT, 4, mpi_op(op), comm_);
    if (op == ReduceOp::kAvg) wide.div_(size_);
    tensor.copy_(wide);
    return;
  }
  torch::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  raw_all_reduce(work.data_ptr(), work.numel(), mpi_datatype(dtype),
                 static_cast<int>(work.element_size()), mpi_op(op), comm_);
  if (op == ReduceOp::kAvg) work.div_(size_);
  if (!work.is_same(tensor)) tensor.copy_(work);
}

void MpiCommunicator::all_reduce(torch::Tensor& tensor, ReduceOp op) {
  wait_all();  // keep issue order: earlier asynchronous operations first
  runtime::trace::Scope traced(trace_lane_, "all_reduce",
                               static_cast<std::int64_t>(byte_size(tensor)), size_ > 1);
  all_reduce_now(tensor, op, issue("all_reduce", tensor));
}

WorkHandle MpiCommunicator::all_reduce_async(torch::Tensor tensor, ReduceOp op) {
  const auto bytes = static_cast<std::int64_t>(byte_size(tensor));
  const runtime::IssuedOp issued = issue("all_reduce", tensor);
  return enqueue([this, tensor, op, issued]() mutable { all_reduce_now(tensor, op, issued); },
                 "all_reduce", bytes);
}

WorkHandle MpiCommunicator::enqueue(std::function<void()> operation, const char* name,
                                    std::int64_t bytes) {
  auto work = std::make_shared<MpiWork>();
  const auto launch = std::chrono::steady_clock::now();
  auto run = [this, operation = std::move(operation), work, launch, name, bytes]() {
    std::exception_ptr error;
    // The slice runs from the launch (or the end of the collective queued before it) to the end.
    const auto begin = std::max(launch, last_end_);
    try {
      operation();
    } catch (...) {
      error = std::current_exception();
    }
    last_end_ = std::chrono::steady_clock::now();
    if (size_ > 1) {
      runtime::trace::record(trace_lane_, name, begin, last_end_, bytes);
    }
    work->finish(error);
  };
  if (!async_thread_) {
    run();
    return work;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (!worker_.joinable()) worker_ = std::thread(&MpiCommunicator::worker_loop, this);
  queue_.emplace_back(std::move(run));
  queue_cv_.notify_one();
  return work;
}

namespace {

// The chunk length of an in-place collective on `buffer`, after the checks every rank makes
// (even on a group of one, so a bad call fails the same way at every size).
std::int64_t in_place_chunk(const torch::Tensor& buffer, int size, const char* operation,
                            const std::string& group) {
  check_cpu(buffer, operation, group);
  (void)mpi_datatype(buffer.scalar_type());
  if (!buffer.is_contiguous() || buffer.numel() % size != 0) {
    throw CommError(str(operation, " on group ", group, ": the buffer must be contiguous with a ",
                        "number of elements divisible by the group size ", size, ", got ",
                        buffer.numel(), " elements", buffer.is_contiguous() ? "" : " (strided)",
                        "; pad it to a multiple of the group size"));
  }
  const std::int64_t chunk = buffer.numel() / size;
  const std::int64_t element =
      is_half_type(buffer.scalar_type()) ? 4 : static_cast<std::int64_t>(buffer.element_size());
  if (chunk * element > INT_MAX) {
    throw CommError(str(operation, " on group ", group, ": ", chunk,
                        " elements per rank exceed the MPI count limit; use smaller buckets"));
  }
  return chunk;
}

}  // namespace

void MpiCommunicator::reduce_scatter_in_place_now(torch::Tensor& buffer, ReduceOp op,
                                                  const runtime::IssuedOp& issued) {
  const std::int64_t chunk = in_place_chunk(buffer, size_, "reduce_scatter", name_);
  const auto dtype = buffer.scalar_type();
  if (op == ReduceOp::kAvg && is_integral(dtype)) {
    throw CommError(str("reduce_scatter avg on group ", name_,
                        ": integer tensors cannot be averaged exactly; use sum"));
  }
  if (size_ == 1) return;
  runtime::CollectiveScope watch(issued);
  // bfloat16/float16 are reduced in float32 and rounded once, as all_reduce does.
  torch::Tensor work = is_half_type(dtype) ? buffer.to(torch::kFloat) : buffer;
  // MPI's in-place form leaves the reduced chunk at the start of the buffer; it belongs at this
  // rank's position (a copy of 1/size of the buffer, not overlapping for rank > 0).
  HPCTRAIN_MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, work.data_ptr(),
                                              static_cast<int>(chunk),
                                              mpi_datatype(work.scalar_type()), mpi_op(op), comm_));
  torch::Tensor reduced = work.narrow(0, 0, chunk);
  if (op == ReduceOp::kAvg) reduced.div_(size_);
  if (rank_ != 0 || !work.is_same(buffer)) buffer.narrow(0, rank_ * chunk, chunk).copy_(reduced);
}

void MpiCommunicator::all_gather_in_place_now(torch::Tensor& buffer,
                                              const runtime::IssuedOp& issued) {
  const std::int64_t chunk = in_place_chunk(buffer, size_, "all_gather", name_);
  if (size_ == 1) return;
  runtime::CollectiveScope watch(issued);
  const int bytes = static_cast<int>(chunk * static_cast<std::int64_t>(buffer.element_size()));
  HPCTRAIN_MPI_CHECK(
      MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer.data_ptr(), bytes, MPI_BYTE, comm_));
}

WorkHandle MpiCommunicator::reduce_scatter_in_place_async(torch::Tensor buffer, ReduceOp op) {
  const auto bytes = static_cast<std::int64_t>(byte_size(buffer));
  const runtime::IssuedOp issued = issue("reduce_scatter", buffer);
  return enqueue(
      [this, buffer, op, issued]() mutable { reduce_scatter_in_place_now(buffer, op, issued); },
      "reduce_scatter", bytes);
}

WorkHandle MpiCommunicator::all_gather_in_place_async(torch::Tensor buffer) {
  const auto bytes = static_cast<std::int64_t>(byte_size(buffer));
  const runtime::IssuedOp issued = issue("all_gather", buffer);
  return enqueue([this, buffer, issued]() mutable { all_gather_in_place_now(buffer, issued); },
                 "all_gather", bytes);
}

void MpiCommunicator::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    queue_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    auto task = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

void MpiCommunicator::wait_all() {
  if (!async_thread_) return;
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void MpiCommunicator::broadcast(torch::Tensor& tensor, int root) {
  wait_all();
  runtime::trace::Scope traced(trace_lane_, "broadcast", -1, size_ > 1);
  check_cpu(tensor, "broadcast", name_);
  if (root < 0 || root >= size_) {
    throw CommError(str("broadcast on group ", name_, ": root ", root, " outside 0..", size_ - 1));
  }
  if (size_ == 1) return;
  runtime::CollectiveScope watch(channel_, "broadcast", name_.c_str(), byte_size(tensor),
                                 c10::toString(tensor.scalar_type()));
  torch::Tensor work = tensor.is_contiguous() ? tensor : tensor.contiguous();
  auto* bytes = static_cast<char*>(work.data_ptr());
  const std::int64_t total = static_cast<std::int64_t>(byte_size(work));
  for (std::int64_t offset = 0; offset < total; offset += kMaxCount) {
    int n = static_cast<int>(std::min(kMaxCount, total - offset));
    HPCTRAIN_MPI_CHECK(MPI_Bcast(bytes + offset, n, MPI_BYTE, root, comm_));
  }
  if (!work.is_same(tensor)) tensor.copy_(work);
}

torch::Tensor MpiCommunicator::all_gather(const torch::Tensor& tensor) {
  wait_all();
  runtime::trace::Scope traced(trace_lane_, "all_gather", -1, size_ > 1);
  check_cpu(tensor, "all_gather", name_);
  torch::Tensor input = tensor.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  if (shape.empty()) shape.push_back(1);
  const int64_t d0 = shape[0];
  shape[0] = d0 * size_;
  torch::Tensor output = torch::empty(shape, input.options());
  const int64_t bytes = static_cast<int64_t>(byte_size(input));
  if (bytes > INT_MAX) {
    throw CommError(str("all_gather on group ", name_, ": ", format_bytes(bytes),
                        " per rank exceeds the 2 GiB MPI count limit; gather in pieces"));
  }
  runtime::CollectiveScope watch(channel_, "all_gather", name_.c_str(),
                                 static_cast<std::size_t>(bytes),
                                 c10::toString(input.scalar_type()));
  HPCTRAIN_MPI_CHECK(MPI_Allgather(input.data_ptr(), static_cast<int>(bytes), MPI_BYTE,
                                   output.data_ptr(), static_cast<int>(bytes), MPI_BYTE, comm_));
  return output;
}

torch::Tensor MpiCommunicator::reduce_scatter(const torch::Tensor& tensor, ReduceOp op) {
  wait_all();
  runtime::trace::Scope traced(trace_lane_, "reduce_scatter", -1, size_ > 1);
  check_cpu(tensor, "reduce_scatter", name_);
  if (tensor.dim() == 0 || tensor.size(0) % size_ != 0) {
    throw CommError(str("reduce_scatter on group ", name_, ": dim 0 of shape ", tensor.sizes(),
                        " must be divisible by the group size ", size_));
  }
  const auto dtype = tensor.scalar_type();
  if (op == ReduceOp::kAvg && is_integral(dtype)) {
    throw CommError(str("reduce_scatter avg on group ", name_,
                        ": integer tensors cannot be "
                        "averaged exactly; use sum"));
  }
  torch::Tensor input = is_half_type(dtype) ? tensor.to(torch::kFloat) : tensor.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] /= size_;
  torch::Tensor output = torch::empty(shape, input.options());
  const int64_t count = output.numel();
  if (count > INT_MAX) {
    throw CommError(str("reduce_scatter on group ", name_, ": ", count,
                        " elements per rank exceed the MPI count limit"));
  }
  {
    runtime::CollectiveScope watch(channel_, "reduce_scatter", name_.c_str(), byte_size(input),
                                   c10::toString(input.scalar_type()));
    HPCTRAIN_MPI_CHECK(
        MPI_Reduce_scatter_block(input.data_ptr(), output.data_ptr(), static_cast<int>(count),
                                 mpi_datatype(input.scalar_type()), mpi_op(op), comm_));
  }
  if (op == ReduceOp::kAvg) output.div_(size_);
  return is_half_type(dtype) ? output.to(dtype) : output;
}

std::string MpiCommunicator::describe_peers(const std::vector<P2PMessage>& batch) const {
  std::string text;
  for (const P2PMessage& m : batch) {
    const bool send = m.kind == P2PMessage::Kind::kSend;
    // The channel's members are the group's world ranks, in group rank order.
    const int world = channel_ && m.peer >= 0 && m.peer < size_
                          ? channel_->members()[static_cast<std::size_t>(m.peer)]
                          : MPI_UNDEFINED;
    text += str(text.empty() ? "" : ", ", send ? "send to" : "recv from", " group rank ", m.peer,
                world == MPI_UNDEFINED ? std::string() : str(" = world rank ", world));
  }
  return text;
}

WorkHandle MpiCommunicator::send_recv_async(std::vector<P2PMessage> batch) {
  std::int64_t bytes = 0;
  for (const P2PMessage& m : batch) {
    const char* what = m.kind == P2PMessage::Kind::kSend ? "send" : "recv";
    check_cpu(m.tensor, what, name_);
    if (m.peer < 0 || m.peer >= size_ || m.peer == rank_) {
      throw CommError(str(what, " on group ", name_, ": peer ", m.peer, " is not another rank of ",
                          "the group (ranks 0..", size_ - 1, ", this one ", rank_, ")"));
    }
    if (!m.tensor.is_contiguous()) {
      throw CommError(str(what, " on group ", name_, ": the tensor must be contiguous, got ",
                          m.tensor.sizes(), " with strides ", m.tensor.strides(),
                          "; pass .contiguous()"));
    }
    bytes += static_cast<std::int64_t>(byte_size(m.tensor));
  }
  // Recorded in the flight recorder when posted, not numbered on the group's channel (only the
  // pair takes part: runtime/collective_scope.hpp); the watchdog's report names the peers.
  runtime::IssuedOp issued;
  if (!batch.empty()) {
    issued = runtime::issue_op(nullptr, "send_recv", name_.c_str(), static_cast<std::size_t>(bytes),
                               c10::toString(batch.front().tensor.scalar_type()));
    issued.detail = describe_peers(batch);
    for (const P2PMessage& m : batch) {
      if (channel_) issued.peers.push_back(channel_->members()[static_cast<std::size_t>(m.peer)]);
    }
  }
  return enqueue([this, batch = std::move(batch),
                  issued = std::move(issued)]() { send_recv_now(batch, issued); },
                 "send_recv", bytes);
}

namespace {

// A message of `bytes` bytes as MPI messages of at most kMaxCount bytes (offset, count); one
// empty piece for an empty message. Both sides cut a message of one size alike, and pieces
// between one pair of ranks on one tag arrive in the order they were posted.
std::vector<std::pair<std::int64_t, int>> pieces(std::int64_t bytes) {
  std::vector<std::pair<std::int64_t, int>> out;
  std::int64_t offset = 0;
  do {
    const int n = static_cast<int>(std::min(kMaxCount, bytes - offset));
    out.emplace_back(offset, n);
    offset += n;
  } while (offset < bytes);
  return out;
}

}  // namespace

void MpiCommunicator::send_recv_now(const std::vector<P2PMessage>& batch,
                                    const runtime::IssuedOp& issued) {
  if (batch.empty()) return;
  runtime::CollectiveScope watch(issued);
  std::vector<MPI_Request> requests;
  std::vector<int> expected;  // per request: the bytes a receive must get (-1: a send)
  for (const P2PMessage& m : batch) {
    auto* data = static_cast<char*>(m.tensor.data_ptr());
    const auto size = static_cast<std::int64_t>(byte_size(m.tensor));
    for (const auto& [offset, n] : pieces(size)) {
      requests.emplace_back();
      if (m.kind == P2PMessage::Kind::kSend) {
        HPCTRAIN_MPI_CHECK(
            MPI_Isend(data + offset, n, MPI_BYTE, m.peer, 0, comm_, &requests.back()));
        expected.push_back(-1);
      } else {
        HPCTRAIN_MPI_CHECK(
            MPI_Irecv(data + offset, n, MPI_BYTE, m.peer, 0, comm_, &requests.back()));
        expected.push_back(n);
      }
    }
  }
  // A short spin catches a neighbour that is already there; after that, short sleeps (doubling to
  // 100 us) leave the cores to computing ranks while this one waits for its neighbour.
  const int count = static_cast<int>(requests.size());
  std::vector<MPI_Status> statuses(requests.size());
  long delay_us = 0;
  for (;;) {
    int done = 0;
    HPCTRAIN_MPI_CHECK(MPI_Testall(count, requests.data(), &done, statuses.data()));
    if (done) break;
    if (delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    delay_us = delay_us == 0 ? 1 : std::min(delay_us * 2, 100L);
  }
  // A receive must be filled exactly: a shorter message means the two sides disagree on what
  // travels (a longer one is MPI's truncation error above).
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (expected[i] < 0) continue;
    int got = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &got);
    if (got != expected[i]) {
      throw CommError(str("recv on group ", name_, " from group rank ", statuses[i].MPI_SOURCE,
                          ": got ", got, " bytes, expected ", expected[i],
                          ": the two ranks disagree on the message (shape or dtype)"));
    }
  }
}

void MpiCommunicator::barrier() {
  wait_all();
  if (size_ == 1) return;
  runtime::CollectiveScope watch(channel_, "barrier", name_.c_str(), 0);
  HPCTRAIN_MPI_CHECK(MPI_Barrier(comm_));
}

}  // namespace hpctrain::comm
