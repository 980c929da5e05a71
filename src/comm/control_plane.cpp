#include "hpctrain/comm/control_plane.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "mpi_reduce_op.hpp"

namespace hpctrain::comm {
namespace {

// Host messages are small; a length that does not fit an MPI count is a programming error.
int checked_count(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw CommError(str("control plane ", what, ": ", n, " elements exceed an MPI count"));
  }
  return static_cast<int>(n);
}

// Sleeps growing from 50 us to `cap_us` between tests: a message is noticed within ~cap, and an
// idle wait costs a few wake-ups per millisecond at most instead of a spinning core (OpenMPI's
// blocking waits spin).
void wait_idle(MPI_Request* requests, int count, long cap_us) {
  long delay_us = 50;
  for (;;) {
    int done = 0;
    HPCTRAIN_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    delay_us = std::min(delay_us * 2, cap_us);
  }
}

template <typename T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, double>) return "float64";
  if constexpr (std::is_same_v<T, int>) return "int32";
  if constexpr (std::is_same_v<T, std::uint64_t>) return "uint64";
  return "int64";
}

template <typename T>
void reduce_in_place(T* data, int count, MPI_Datatype type, ReduceOp op, MPI_Comm comm,
                     const std::string& group, runtime::Channel* channel) {
  runtime::CollectiveScope watch(channel, "allreduce (control)", group.c_str(),
                                 sizeof(T) * static_cast<std::size_t>(count), dtype_name<T>());
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, count, type, mpi_op(op), comm));
}

}  // namespace

ControlPlane::ControlPlane(MPI_Comm comm, std::string name)
    : ControlPlane(comm, std::move(name), false, 0) {}

ControlPlane::ControlPlane(MPI_Comm comm, std::string name, bool owned, int copy)
    : comm_(comm), name_(std::move(name)), owned_(owned), copy_(copy) {
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(comm_, &size_));
  // Copies (duplicate()) run on other threads: each has its own channel, numbered by the order
  // the copies were made, which every member shares (duplicate is collective).
  channel_ = runtime::channel(name_, copy_ == 0 ? "control" : str("control ", copy_ + 1), comm_);
}

ControlPlane::~ControlPlane() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<ControlPlane> ControlPlane::duplicate() const {
  MPI_Comm copy = MPI_COMM_NULL;
  HPCTRAIN_MPI_CHECK(MPI_Comm_dup(comm_, &copy));
  static std::mutex mutex;
  static std::map<std::uint32_t, int> copies;  // per channel: copies made so far
  int number = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    number = ++copies[channel_ ? channel_->id() : 0];
  }
  return std::unique_ptr<ControlPlane>(new ControlPlane(copy, name_, true, number));
}

bool ControlPlane::any(bool flag) {
  int v = flag ? 1 : 0;
  reduce_in_place(&v, 1, MPI_INT, ReduceOp::kMax, comm_, name_, channel_);
  return v != 0;
}

bool ControlPlane::all(bool flag) {
  int v = flag ? 1 : 0;
  reduce_in_place(&v, 1, MPI_INT, ReduceOp::kMin, comm_, name_, channel_);
  return v != 0;
}

double ControlPlane::reduce(double value, ReduceOp op) {
  reduce_in_place(&value, 1, MPI_DOUBLE, op, comm_, name_, channel_);
  return op == ReduceOp::kAvg ? value / size_ : value;
}

std::int64_t ControlPlane::reduce(std::int64_t value, ReduceOp op) {
  if (op == ReduceOp::kAvg) {
    throw CommError("control plane: avg of integers cannot be represented exactly; sum instead");
  }
  reduce_in_place(&value, 1, MPI_INT64_T, op, comm_, name_, channel_);
  return value;
}

void ControlPlane::reduce(std::vector<double>& values, ReduceOp op) {
  reduce_in_place(values.data(), checked_count(values.size(), "reduce"), MPI_DOUBLE, op, comm_,
                  name_, channel_);
  if (op == ReduceOp::kAvg) {
    for (double& v : values) v /= size_;
  }
}

void ControlPlane::reduce(std::vector<std::int64_t>& values, ReduceOp op) {
  if (op == ReduceOp::kAvg) {
    throw CommError("control plane: avg of integers cannot be represented exactly; sum instead");
  }
  reduce_in_place(values.data(), checked_count(values.size(), "reduce"), MPI_INT64_T, op, comm_,
                  name_, channel_);
}

void ControlPlane::reduce(std::vector<std::uint64_t>& values, ReduceOp op) {
  if (op == ReduceOp::kAvg) {
    throw CommError("control plane: avg of integers cannot be represented exactly; sum instead");
  }
  reduce_in_place(values.data(), checked_count(values.size(), "reduce"), MPI_UINT64_T, op, comm_,
                  name_, channel_);
}

void ControlPlane::reduce(std::vector<int>& values, ReduceOp op) {
  if (op == ReduceOp::kAvg) {
    throw CommError("control plane: avg of integers cannot be represented exactly; sum instead");
  }
  reduce_in_place(values.data(), checked_count(values.size(), "reduce"), MPI_INT, op, comm_, name_,
                  channel_);
}

std::vector<std::int64_t> ControlPlane::all_gather(std::int64_t value) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(size_));
  runtime::CollectiveScope watch(channel_, "allgather (control)", name_.c_str(), sizeof value,
                                 "int64");
  HPCTRAIN_MPI_CHECK(MPI_Allgather(&value, 1, MPI_INT64_T, out.data(), 1, MPI_INT64_T, comm_));
  return out;
}

std::vector<double> ControlPlane::all_gather(double value) {
  std::vector<double> out(static_cast<std::size_t>(size_));
  runtime::CollectiveScope watch(channel_, "allgather (control)", name_.c_str(), sizeof value,
                                 "float64");
  HPCTRAIN_MPI_CHECK(MPI_Allgather(&value, 1, MPI_DOUBLE, out.data(), 1, MPI_DOUBLE, comm_));
  return out;
}

std::string ControlPlane::broadcast(const std::string& text, int root) {
  runtime::CollectiveScope watch(channel_, "broadcast (control)", name_.c_str(), text.size(),
                                 "char");
  std::int64_t length = static_cast<std::int64_t>(text.size());
  HPCTRAIN_MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT64_T, root, comm_));
  std::string out = text;
  out.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    HPCTRAIN_MPI_CHECK(
        MPI_Bcast(out.data(), checked_count(out.size(), "broadcast"), MPI_CHAR, root, comm_));
  }
  return out;
}

std::string ControlPlane::broadcast_idle(const std::string& text, int root) {
  // A decision is noticed within ~20 ms, and an idle rank wakes ~50 times a second.
  constexpr long kCapUs = 20000;
  runtime::CollectiveScope numbered(channel_, "broadcast (control)", name_.c_str(), text.size(),
                                    "char", /*watched=*/false);
  std::int64_t length = static_cast<std::int64_t>(text.size());
  MPI_Request request;
  HPCTRAIN_MPI_CHECK(MPI_Ibcast(&length, 1, MPI_INT64_T, root, comm_, &request));
  wait_idle(&request, 1, kCapUs);
  std::string out = text;
  out.resize(static_cast<std::size_t>(length));
  if (length > 0) {
    HPCTRAIN_MPI_CHECK(MPI_Ibcast(out.data(), checked_count(out.size(), "broadcast"), MPI_CHAR,
                                  root, comm_, &request));
    wait_idle(&request, 1, kCapUs);
  }
  return out;
}

std::vector<std::uint8_t> ControlPlane::gather_bytes(const void* data, std::size_t bytes,
                                                     int root) {
  std::vector<std::uint8_t> all;
  if (rank_ == root) all.resize(bytes * static_cast<std::size_t>(size_));
  runtime::CollectiveScope watch(channel_, "gather (control)", name_.c_str(), bytes, "uint8");
  const int count = checked_count(bytes, "gather");
  HPCTRAIN_MPI_CHECK(MPI_Gather(data, count, MPI_UINT8_T, rank_ == root ? all.data() : nullptr,
                                count, MPI_UINT8_T, root, comm_));
  return all;
}

void ControlPlane::scatter_bytes(const void* all, void* out, std::size_t bytes, int root) {
  runtime::CollectiveScope watch(channel_, "scatter (control)", name_.c_str(), bytes, "uint8");
  const int count = checked_count(bytes, "scatter");
  HPCTRAIN_MPI_CHECK(MPI_Scatter(rank_ == root ? all : nullptr, count, MPI_UINT8_T, out, count,
                                 MPI_UINT8_T, root, comm_));
}

void ControlPlane::send_text(int dest, int tag, const std::string& text) {
  runtime::CollectiveScope recorded(nullptr, "send (control)", name_.c_str(), text.size(), "char",
                                    /*watched=*/false);
  std::int64_t length = static_cast<std::int64_t>(text.size());
  MPI_Request requests[2];
  HPCTRAIN_MPI_CHECK(MPI_Isend(&length, 1, MPI_INT64_T, dest, tag, comm_, &requests[0]));
  HPCTRAIN_MPI_CHECK(MPI_Isend(text.data(), checked_count(text.size(), "send"), MPI_CHAR, dest, tag,
                               comm_, &requests[1]));
  wait_idle(requests, 2, 2000);
}

std::string ControlPlane::recv_text(int source, int tag) {
  runtime::CollectiveScope recorded(nullptr, "recv (control)", name_.c_str(), 0, "char",
                                    /*watched=*/false);
  std::int64_t length = 0;
  MPI_Request request;
  HPCTRAIN_MPI_CHECK(MPI_Irecv(&length, 1, MPI_INT64_T, source, tag, comm_, &request));
  wait_idle(&request, 1, 2000);
  std::string text(static_cast<std::size_t>(length), '\0');
  HPCTRAIN_MPI_CHECK(MPI_Irecv(text.data(), checked_count(text.size(), "recv"), MPI_CHAR, source,
                               tag, comm_, &request));
  wait_idle(&request, 1, 2000);
  return text;
}

namespace {
constexpr std::size_t kBulkPiece = std::size_t{1} << 30;  // under an MPI count of bytes
}  // namespace

void ControlPlane::send_bytes(int dest, int tag, const void* data, std::size_t bytes) {
  runtime::CollectiveScope recorded(nullptr, "send (control)", name_.c_str(), bytes, "uint8",
                                    /*watched=*/false);
  const auto* from = static_cast<const std::uint8_t*>(data);
  for (std::size_t at = 0; at < bytes; at += kBulkPiece) {
    const int n = static_cast<int>(std::min(kBulkPiece, bytes - at));
    HPCTRAIN_MPI_CHECK(MPI_Send(from + at, n, MPI_UINT8_T, dest, tag, comm_));
  }
}

void ControlPlane::recv_bytes(int source, int tag, void* out, std::size_t bytes) {
  runtime::CollectiveScope recorded(nullptr, "recv (control)", name_.c_str(), bytes, "uint8",
                                    /*watched=*/false);
  auto* into = static_cast<std::uint8_t*>(out);
  for (std::size_t at = 0; at < bytes; at += kBulkPiece) {
    const int n = static_cast<int>(std::min(kBulkPiece, bytes - at));
    HPCTRAIN_MPI_CHECK(MPI_Recv(into + at, n, MPI_UINT8_T, source, tag, comm_, MPI_STATUS_IGNORE));
  }
}

std::optional<std::pair<int, std::string>> ControlPlane::first_problem(const std::string& problem) {
  int first = problem.empty() ? size_ : rank_;
  reduce_in_place(&first, 1, MPI_INT, ReduceOp::kMin, comm_, name_, channel_);
  if (first == size_) return std::nullopt;
  return std::make_pair(first, broadcast(problem, first));
}

void ControlPlane::barrier() {
  runtime::CollectiveScope watch(channel_, "barrier (control)", name_.c_str(), 0);
  HPCTRAIN_MPI_CHECK(MPI_Barrier(comm_));
}

ControlGroups make_control_groups(const runtime::ProcessGrid& grid) {
  ControlGroups groups;
  groups.world = std::make_shared<ControlPlane>(grid.world_comm(), "world");
  groups.dp = std::make_shared<ControlPlane>(grid.dp_comm(), "dp");
  groups.tp = std::make_shared<ControlPlane>(grid.tp_comm(), "tp");
  groups.pp = std::make_shared<ControlPlane>(grid.pp_comm(), "pp");
  return groups;
}

}  // namespace hpctrain::comm
