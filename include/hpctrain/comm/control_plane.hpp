#pragma once
// The control plane: host values exchanged over MPI between the ranks of one process group.
// Stop flags, deadlines, metric and ledger sums, norms as scalars, text decisions of rank 0: every
// host-side agreement of a run goes through here, whatever the data plane is. The data plane
// (Communicator: MPI on CPU, NCCL on GPU) carries model tensors on the run's device only; NCCL
// refuses host memory, so the split is what lets a GPU run agree on anything at all. Nothing in
// this header is a torch::Tensor, so the type system keeps the two planes apart.
//
// Every blocking call runs under the collective watchdog (runtime/watchdog.hpp), named after its
// operation and group. docs/ARCHITECTURE.md describes both planes.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/comm/reduce_op.hpp"

namespace hpctrain::runtime {
class Channel;
class ProcessGrid;
}  // namespace hpctrain::runtime

namespace hpctrain::comm {

/// One process group's control channel. Methods marked "Collective" must be called by every rank
/// of the group in the same order; they are not thread-safe: a second thread gets its own
/// duplicate().
class ControlPlane {
 public:
  /// Wraps `comm` (not duplicated, not freed: the ProcessGrid or Runtime owns it). `name` is the
  /// group's name in messages ("world", "dp", "tp"). Local.
  ControlPlane(MPI_Comm comm, std::string name);
  ~ControlPlane();
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  /// A private channel over the same ranks (MPI_Comm_dup, freed with it) for another thread, such
  /// as the checkpoint writer: its messages never mix with this one's. Collective.
  std::unique_ptr<ControlPlane> duplicate() const;

  /// This rank in the group, the group's size and name. Local.
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }

  /// True when `flag` is true on any rank / on every rank. Collective.
  bool any(bool flag);
  bool all(bool flag);

  /// The reduction of one value over the group. kAvg is the sum divided by the size (doubles
  /// only). Collective.
  double reduce(double value, ReduceOp op);
  std::int64_t reduce(std::int64_t value, ReduceOp op);
  /// Element-wise reduction in place; every rank passes the same length. Collective.
  void reduce(std::vector<double>& values, ReduceOp op);
  void reduce(std::vector<std::int64_t>& values, ReduceOp op);
  void reduce(std::vector<std::uint64_t>& values, ReduceOp op);
  void reduce(std::vector<int>& values, ReduceOp op);

  /// Shorthands for the common reductions. Collective.
  double sum(double value) { return reduce(value, ReduceOp::kSum); }
  double max(double value) { return reduce(value, ReduceOp::kMax); }
  double min(double value) { return reduce(value, ReduceOp::kMin); }

  /// Every rank's value in rank order. Collective.
  std::vector<std::int64_t> all_gather(std::int64_t value);
  std::vector<double> all_gather(double value);

  /// `text` of `root` on every rank (any length). Collective.
  std::string broadcast(const std::string& text, int root = 0);
  /// The same, waiting with short sleeps instead of spinning in MPI and without the watchdog: for
  /// ranks that legitimately wait minutes for rank 0's decision (a checkpoint watcher idling next
  /// to the training job it watches). Collective.
  std::string broadcast_idle(const std::string& text, int root = 0);

  /// `bytes` bytes of every rank, concatenated in rank order on `root` (empty elsewhere).
  /// Collective; every rank passes the same count.
  std::vector<std::uint8_t> gather_bytes(const void* data, std::size_t bytes, int root = 0);
  /// Rank r receives bytes [r * bytes, (r + 1) * bytes) of `all` (size * bytes, read on `root`
  /// only) into `out`. Collective.
  void scatter_bytes(const void* all, void* out, std::size_t bytes, int root = 0);

  /// Text to one rank / from one rank, waiting with short sleeps (a background writer must leave
  /// the cores to training). Local to the pair; messages of one tag arrive in order.
  void send_text(int dest, int tag, const std::string& text);
  std::string recv_text(int source, int tag);
  /// `bytes` bytes to one rank / into `out` from one rank, blocking, in pieces under 1 GiB: bulk
  /// data after the pair agreed on the size (prepare text's token ids into their place on rank
  /// 0). Local to the pair; messages of one tag arrive in order.
  void send_bytes(int dest, int tag, const void* data, std::size_t bytes);
  void recv_bytes(int source, int tag, void* out, std::size_t bytes);

  /// Every rank passes its problem (empty: none). Returns the lowest rank that has one and its
  /// message, on every rank, or nullopt when no rank has one. Collective.
  std::optional<std::pair<int, std::string>> first_problem(const std::string& problem);

  /// Returns once every rank has called it. Collective.
  void barrier();

  /// The MPI communicator, for libraries that take one (parallel HDF5). Local.
  MPI_Comm mpi_comm() const { return comm_; }

 private:
  ControlPlane(MPI_Comm comm, std::string name, bool owned, int copy);

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  bool owned_ = false;
  int copy_ = 0;                         // 0: the group's channel; n: the n-th duplicate()
  runtime::Channel* channel_ = nullptr;  // sequence numbers and the flight recorder
};

/// The control channels of the process grid's groups. Local value type.
struct ControlGroups {
  std::shared_ptr<ControlPlane> world;
  std::shared_ptr<ControlPlane> dp;
  std::shared_ptr<ControlPlane> tp;
  std::shared_ptr<ControlPlane> pp;  ///< the stages of this rank's pipeline (size 1 when pp = 1)
};

/// Control channels over the grid's world, dp, tp and pp communicators (not duplicated). Local.
ControlGroups make_control_groups(const runtime::ProcessGrid& grid);

}  // namespace hpctrain::comm
