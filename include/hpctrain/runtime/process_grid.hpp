#pragma once
// The process grid: world = dp x tp, tensor parallel innermost, so ranks 0..tp-1 form the first
// tensor-parallel group and tp groups stay inside a node when tp divides the ranks per node.

#include <mpi.h>

#include <string>

namespace hpctrain::runtime {

class Runtime;

/// A grid shape. Local value type.
struct GridShape {
  int dp = 1;
  int tp = 1;
};

/// Checks that `tp` is positive and divides `world_size`; throws ConfigError naming the sizes
/// and the fix otherwise. Local: every rank runs it on the same values before any collective,
/// so every rank reports the same error and none waits in a collective.
GridShape validate_grid(int world_size, int tp);

/// This rank's place in the grid and the MPI sub-communicators of its groups.
class ProcessGrid {
 public:
  /// Validates the shape (see validate_grid), then splits `base` (the world by default; tests
  /// pass MPI_COMM_SELF for single-rank references) into tp and dp groups. Collective over `base`.
  ProcessGrid(const Runtime& runtime, int tp, MPI_Comm base = MPI_COMM_WORLD);
  /// Frees the sub-communicators. Collective over MPI_COMM_WORLD (MPI_Comm_free).
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.dp * shape_.tp; }
  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  GridShape shape() const { return shape_; }
  /// The communicator the grid spans (MPI_COMM_WORLD unless built over another).
  MPI_Comm world_comm() const { return base_; }
  /// Ranks with the same tp_rank (they hold the same shard and average gradients).
  MPI_Comm dp_comm() const { return dp_comm_; }
  /// Ranks with the same dp_rank (they split layers and read the same samples).
  MPI_Comm tp_comm() const { return tp_comm_; }
  /// True when every tensor-parallel group lies inside one node.
  bool tp_groups_within_nodes() const { return tp_within_node_; }
  /// "dp=2 x tp=2". Local.
  std::string describe() const;

 private:
  GridShape shape_;
  int world_rank_ = 0;
  int dp_rank_ = 0;
  int tp_rank_ = 0;
  bool tp_within_node_ = true;
  MPI_Comm base_ = MPI_COMM_WORLD;
  MPI_Comm dp_comm_ = MPI_COMM_NULL;
  MPI_Comm tp_comm_ = MPI_COMM_NULL;
};

}  // namespace hpctrain::runtime
