#pragma once
// MPI backend for CPU tensors: float32/64, int8/32/64, uint8, and bfloat16/float16 (reduced in
// float32 and rounded once, so the result does not depend on the reduction order).
// Asynchronous all-reduce runs on one communication thread per communicator, which calls the
// blocking MPI collective: with OpenMPI's shared-memory transport a non-blocking MPI_Iallreduce
// only progresses inside MPI calls, so it would not overlap with backward computation.
// Point-to-point batches run there too: the thread posts MPI_Isend/MPI_Irecv for the whole batch
// and progresses them with MPI_Testall, sleeping briefly between tests so a rank waiting for its
// pipeline neighbour leaves the cores to the ranks computing.

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/runtime/collective_scope.hpp"

namespace hpctrain::runtime {
class Channel;
}

namespace hpctrain::comm {

class MpiCommunicator final : public Communicator {
 public:
  /// Wraps `comm` (not duplicated, not freed: the ProcessGrid or Runtime owns it). `async_thread`
  /// false runs asynchronous operations inline (required when MPI granted less than
  /// MPI_THREAD_MULTIPLE). Local.
  MpiCommunicator(MPI_Comm comm, std::string name, bool async_thread);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "mpi"; }
  MPI_Comm mpi_comm() const { return comm_; }

  void all_reduce(torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle all_reduce_async(torch::Tensor tensor, ReduceOp op) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  torch::Tensor all_gather(const torch::Tensor& tensor) override;
  torch::Tensor reduce_scatter(const torch::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter_in_place_async(torch::Tensor buffer, ReduceOp op) override;
  WorkHandle all_gather_in_place_async(torch::Tensor buffer) override;
  void barrier() override;
  void wait_all() override;
  WorkHandle send_recv_async(std::vector<P2PMessage> batch) override;

  /// One plain in-place MPI_Allreduce on `tensor` (a contiguous CPU tensor of a natively reduced
  /// dtype: not bfloat16/float16; sum, max or min), with none of all_reduce's checks, chunking or
  /// watchdog: the baseline `hpctrain bench allreduce` compares against. Collective.
  void plain_mpi_all_reduce(torch::Tensor& tensor, ReduceOp op);

 private:
  // The operation, numbered on the group's channel when it was issued (issue()), runs now.
  void all_reduce_now(torch::Tensor& tensor, ReduceOp op, const runtime::IssuedOp& issued);
  void reduce_scatter_in_place_now(torch::Tensor& buffer, ReduceOp op,
                                   const runtime::IssuedOp& issued);
  void all_gather_in_place_now(torch::Tensor& buffer, const runtime::IssuedOp& issued);
  /// Numbers `op` on `tensor` on the channel and records it as enqueued (nothing on a group of
  /// one: no collective runs). Call in issue order. Local.
  runtime::IssuedOp issue(const char* op, const torch::Tensor& tensor);
  /// Posts `batch` and waits for every message of it, under the watchdog (`issued` names the
  /// peers).
  void send_recv_now(const std::vector<P2PMessage>& batch, const runtime::IssuedOp& issued);
  /// "send to group rank 1 = world rank 3, recv from ...": who a batch waits on. Local.
  std::string describe_peers(const std::vector<P2PMessage>& batch) const;
  /// Runs `operation` on the communication thread (or now, without one), traced as `name` over
  /// `bytes` on the group's lane.
  WorkHandle enqueue(std::function<void()> operation, const char* name, std::int64_t bytes);
  void worker_loop();

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  bool async_thread_;

  std::mutex mutex_;
  std::condition_variable queue_cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
  // logging.trace: this communicator's lane ("comm <name>"), and the end of its last collective
  // (collectives run one after another, so a queued one starts when the previous one ended).
  int trace_lane_ = 0;
  runtime::Channel* channel_ = nullptr;  // sequence numbers and the flight recorder
  std::chrono::steady_clock::time_point last_end_{};
};

/// MPI datatype carrying one element of `dtype`; throws CommError for unsupported dtypes. Local.
MPI_Datatype mpi_datatype(c10::ScalarType dtype);

}  // namespace hpctrain::comm
