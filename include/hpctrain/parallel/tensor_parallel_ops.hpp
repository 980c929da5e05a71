#pragma once
// The four conjugate communication operations of Megatron-style tensor parallelism, as C++
// autograd functions over the tensor-parallel group, plus gradient averaging for parameters that
// are replicated within that group.
//
//   copy_to_tp_region       forward identity        backward all-reduce (sum)
//   reduce_from_tp_region   forward all-reduce      backward identity
//   gather_from_tp_region   forward all-gather      backward split       (along the last dim)
//   scatter_to_tp_region    forward split           backward all-gather  (along the last dim)
//
// A null communicator, or one of size 1, means "no tensor parallelism": every operation then
// returns its input unchanged and adds nothing to the autograd graph, so tp = 1 costs nothing.
// The communicator must outlive the backward pass of every graph that used it (the autograd
// nodes keep a reference to it).

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/comm/communicator.hpp"

namespace hpctrain::parallel {

/// The tensor-parallel group a layer works over; null means tp = 1.
using CommPtr = std::shared_ptr<comm::Communicator>;

/// This rank's index in the tp group (0 for a null group). Local.
inline int tp_rank_of(const CommPtr& tp) {
  return tp ? tp->rank() : 0;
}
/// The tp group's size (1 for a null group). Local.
inline int tp_size_of(const CommPtr& tp) {
  return tp ? tp->size() : 1;
}
/// Whether the tp group spans more than one rank (false for a null group). Local.
inline bool is_parallel(const CommPtr& tp) {
  return tp && tp->size() > 1;
}

/// Identity forward; the backward all-reduces (sums) the gradient over the tp group. Put in front
/// of a layer whose shards each read the whole (replicated) input. Collective over tp in
/// backward only.
torch::Tensor copy_to_tp_region(const torch::Tensor& input, const CommPtr& tp);

/// All-reduces (sums) `input` over the tp group IN PLACE and returns it; the backward passes the
/// gradient through unchanged. `input` must be a fresh intermediate that nothing else reads
/// afterwards (a matmul or embedding output) and not a leaf that requires grad: reducing in place
/// saves a copy of every activation it touches. Collective over tp in forward.
torch::Tensor reduce_from_tp_region(torch::Tensor input, const CommPtr& tp);

/// Concatenates the tp ranks' `input`s along the last dimension in rank order (every rank passes
/// the same shape); the backward keeps this rank's slice of the gradient. Collective over tp in
/// forward.
torch::Tensor gather_from_tp_region(const torch::Tensor& input, const CommPtr& tp);

/// Keeps this rank's 1/tp slice of `input` along the last dimension (which must divide by tp);
/// the backward all-gathers the gradient slices. Collective over tp in backward.
torch::Tensor scatter_to_tp_region(const torch::Tensor& input, const CommPtr& tp);

/// Averages the gradients of `params` (parameters replicated within the tp group) over the group
/// in one all-reduce, so replicated parameters stay bitwise identical whatever the backend's
/// reduction order. Parameters without a gradient are skipped; every rank must pass the same
/// list. Collective over tp (a no-op for tp = 1).
void average_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& tp);

/// Seconds this process has spent inside the tensor-parallel collectives of a model since start
/// (or the last reset): the four region operations above, forward and backward, and the
/// collectives of the vocabulary-parallel embedding and cross entropy. Host wall time around each
/// blocking call, so on CPU (MPI) it includes waiting for the slowest rank of the tp group; with
/// NCCL it measures only the enqueue unless the caller synchronises the stream. tp = 1 adds
/// nothing. Benchmarks divide it by the steps run. Local; thread-safe.
double tensor_parallel_comm_seconds();
/// The number of collectives counted in tensor_parallel_comm_seconds(). Local; thread-safe.
std::int64_t tensor_parallel_comm_calls();
/// Sets both counters back to zero. Local; thread-safe.
void reset_tensor_parallel_comm_seconds();

/// Adds the wall time of its scope to tensor_parallel_comm_seconds(): wrap each tp collective of
/// a layer in one. Costs two steady_clock reads and an atomic add. Local.
class TpCommTimer {
 public:
  TpCommTimer() : start_(std::chrono::steady_clock::now()) {}
  ~TpCommTimer();
  TpCommTimer(const TpCommTimer&) = delete;
  TpCommTimer& operator=(const TpCommTimer&) = delete;

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hpctrain::parallel
