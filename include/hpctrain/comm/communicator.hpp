#pragma once
// The Communicator interface: the data plane. Collectives on model tensors on the run's device over
// one process group, and point-to-point messages between its ranks (pipeline activations and
// their gradients). Backends: MPI (CPU tensors) and NCCL (CUDA tensors). Host values (flags,
// metric sums, norms, text) never travel here: they go through the control plane
// (control_plane.hpp). Every collective is collective over the group: all of its ranks must call
// the same operations in the same order with matching shapes and dtypes.

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "hpctrain/comm/reduce_op.hpp"

namespace hpctrain::comm {

/// A collective in flight. wait() returns once the result is in the tensor (for NCCL: once the
/// current CUDA stream is ordered after it) and rethrows the collective's error, if any.
class Work {
 public:
  virtual ~Work() = default;
  /// Blocks until the operation completed; rethrows its error. Local; idempotent.
  virtual void wait() = 0;
  /// Whether the operation completed (without blocking). Local.
  virtual bool done() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

/// One message of a point-to-point batch (Communicator::send_recv_async).
struct P2PMessage {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  /// Send: the data (read, not modified). Receive: filled in place with exactly as many bytes as
  /// the matching send carries. Contiguous, on the communicator's device.
  torch::Tensor tensor;
  int peer = -1;  ///< the group rank at the other end (not this rank)

  static P2PMessage send(torch::Tensor tensor, int peer) {
    return P2PMessage{Kind::kSend, std::move(tensor), peer};
  }
  static P2PMessage recv(torch::Tensor tensor, int peer) {
    return P2PMessage{Kind::kRecv, std::move(tensor), peer};
  }
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's rank in the group, and the group's size. Local.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The group's name in messages ("world", "dp", "tp"). Local.
  virtual const std::string& name() const = 0;
  /// "mpi" or "nccl". Local.
  virtual const char* backend() const = 0;

  /// Reduces `tensor` across the group, in place. Collective. Any layout; avg of integer tensors
  /// is refused (CommError) because it cannot be represented exactly.
  virtual void all_reduce(torch::Tensor& tensor, ReduceOp op = ReduceOp::kSum) = 0;
  /// Starts all_reduce and returns at once; the tensor must stay untouched until wait().
  /// Operations on one communicator complete in the order they were issued. Collective.
  virtual WorkHandle all_reduce_async(torch::Tensor tensor, ReduceOp op = ReduceOp::kSum) = 0;
  /// Copies `tensor` from group rank `root` to every rank, in place. Collective.
  virtual void broadcast(torch::Tensor& tensor, int root = 0) = 0;
  /// Concatenates every rank's `tensor` along dim 0 in rank order: shape [size * d0, ...].
  /// Collective; every rank must pass the same shape.
  virtual torch::Tensor all_gather(const torch::Tensor& tensor) = 0;
  /// Reduces `tensor` (dim 0 divisible by size) across the group and returns this rank's
  /// contiguous 1/size of it along dim 0. Collective.
  virtual torch::Tensor reduce_scatter(const torch::Tensor& tensor,
                                       ReduceOp op = ReduceOp::kSum) = 0;
  /// Starts a reduce-scatter in place on `buffer` (contiguous, numel divisible by size()) and
  /// returns at once: when the work completes, chunk rank() of the buffer (elements
  /// [rank * n / size, (rank + 1) * n / size)) holds the reduction of every rank's chunk rank();
  /// the other chunks hold unspecified values. The buffer must stay untouched until wait().
  /// Ordered with the other asynchronous operations of the communicator. Collective.
  virtual WorkHandle reduce_scatter_in_place_async(torch::Tensor buffer,
                                                   ReduceOp op = ReduceOp::kSum) = 0;
  /// Starts an all-gather in place on `buffer` (contiguous, numel divisible by size()): when the
  /// work completes, every chunk r holds rank r's chunk r. Collective.
  virtual WorkHandle all_gather_in_place_async(torch::Tensor buffer) = 0;
  /// Returns when every rank of the group has called it. Collective.
  virtual void barrier() = 0;

  /// Posts every message of `batch` together (sends to and receives from any other ranks of the
  /// group) and returns at once; the work completes when all of them have. Between two ranks,
  /// messages match in the order they are posted (NCCL's rule; MPI's with one tag): the peer must
  /// post, in the same order, a receive of the same size for each send, so two sends in one batch
  /// may not be reordered (docs/PIPELINE.md). The tensors must stay untouched until wait(). A
  /// wait runs under the collective watchdog, which names the peers. Ordered with the
  /// communicator's other asynchronous operations. Local to the ranks it names, each of which
  /// must post the matching messages.
  virtual WorkHandle send_recv_async(std::vector<P2PMessage> batch) = 0;
  /// Sends `tensor` to group rank `peer` and waits until it is on its way. Local to the pair.
  void send(const torch::Tensor& tensor, int peer) {
    send_recv_async({P2PMessage::send(tensor, peer)})->wait();
  }
  /// Receives into `tensor` from group rank `peer` and waits for it. Local to the pair.
  void recv(torch::Tensor& tensor, int peer) {
    send_recv_async({P2PMessage::recv(tensor, peer)})->wait();
  }
  /// Waits for every asynchronous operation issued so far. Local.
  virtual void wait_all() = 0;
};

}  // namespace hpctrain::comm
