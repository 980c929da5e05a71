#pragma once
// The process grid: world = dp x pp x tp, tensor parallel innermost, then pipeline stages, then
// data parallel (as Megatron-LM orders them): world rank = (dp_rank x pp + pp_rank) x tp + tp_rank.
// Ranks 0..tp-1 form the first tensor-parallel group, so tp groups stay inside a node when tp
// divides the ranks per node; the pp groups connect the stages of one model replica; the dp
// groups connect the replicas of one (stage, tp shard). With pp = 1 (the default) every group is
// what it was on the dp x tp grid.

#include <mpi.h>

#include <string>

namespace hpctrain::runtime {

class Runtime;

/// A grid shape. Local value type.
struct GridShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
};

/// Checks that `tp` and `pp` are positive and that tp x pp divides `world_size`; throws
/// ConfigError naming the sizes and the fix otherwise. Local: every rank runs it on the same
/// values before any collective, so every rank reports the same error and none waits in a
/// collective.
GridShape validate_grid(int world_size, int tp, int pp = 1);

/// This rank's place in the grid and the MPI sub-communicators of its groups.
class ProcessGrid {
 public:
  /// Validates the shape (see validate_grid), then splits `base` (the world by default; tests
  /// pass MPI_COMM_SELF for single-rank references) into tp, pp, dp and model groups. Collective
  /// over `base`.
  ProcessGrid(const Runtime& runtime, int tp, int pp, MPI_Comm base = MPI_COMM_WORLD);
  /// The dp x tp grid (pp = 1). Collective over `base`.
  ProcessGrid(const Runtime& runtime, int tp, MPI_Comm base = MPI_COMM_WORLD)
      : ProcessGrid(runtime, tp, 1, base) {}
  /// Frees the sub-communicators. Collective over MPI_COMM_WORLD (MPI_Comm_free).
  ~ProcessGrid();
  ProcessGrid(const ProcessGrid&) = delete;
  ProcessGrid& operator=(const ProcessGrid&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.dp * shape_.pp * shape_.tp; }
  int dp_size() const { return shape_.dp; }
  int tp_size() const { return shape_.tp; }
  int pp_size() const { return shape_.pp; }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  GridShape shape() const { return shape_; }
  /// The world rank of grid coordinates (dp_rank, pp_rank, tp_rank). Local.
  int world_rank_of(int dp_rank, int pp_rank, int tp_rank) const {
    return (dp_rank * shape_.pp + pp_rank) * shape_.tp + tp_rank;
  }
  /// The communicator the grid spans (MPI_COMM_WORLD unless built over another).
  MPI_Comm world_comm() const { return base_; }
  /// Ranks with the same pp_rank and tp_rank (they hold the same shard of the same stage and
  /// average gradients), in dp_rank order.
  MPI_Comm dp_comm() const { return dp_comm_; }
  /// Ranks with the same dp_rank and pp_rank (they split layers and read the same samples), in
  /// tp_rank order.
  MPI_Comm tp_comm() const { return tp_comm_; }
  /// Ranks with the same dp_rank and tp_rank: the stages of one pipeline, in pp_rank order
  /// (activations and their gradients travel here). Size 1 when pp = 1.
  MPI_Comm pp_comm() const { return pp_comm_; }
  /// Ranks with the same dp_rank: one whole model replica (pp x tp ranks), in world rank order
  /// (pp_rank x tp + tp_rank). The tp group when pp = 1. Checkpoint writers meet here.
  MPI_Comm model_comm() const { return model_comm_; }
  /// True when every tensor-parallel group lies inside one node.
  bool tp_groups_within_nodes() const { return tp_within_node_; }
  /// "dp=2 x tp=2" (pp = 1), "dp=2 x pp=2 x tp=2". Local.
  std::string describe() const;

 private:
  GridShape shape_;
  int world_rank_ = 0;
  int dp_rank_ = 0;
  int tp_rank_ = 0;
  int pp_rank_ = 0;
  bool tp_within_node_ = true;
  MPI_Comm base_ = MPI_COMM_WORLD;
  MPI_Comm dp_comm_ = MPI_COMM_NULL;
  MPI_Comm tp_comm_ = MPI_COMM_NULL;
  MPI_Comm pp_comm_ = MPI_COMM_NULL;
  MPI_Comm model_comm_ = MPI_COMM_NULL;
};

}  // namespace hpctrain::runtime
