#include "hpctrain/runtime/process_grid.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {

GridShape validate_grid(int world_size, int tp) {
  if (tp < 1) {
    throw ConfigError(str("parallel.tp = ", tp,
                          " is not a valid tensor-parallel size: it must be "
                          "a positive integer (1 turns tensor parallelism off)"));
  }
  if (world_size % tp != 0) {
    throw ConfigError(str("world size ", world_size, " is not divisible by parallel.tp = ", tp,
                          ": the grid is world = dp x tp, so launch a multiple of ", tp,
                          " ranks (e.g. mpirun -np ", (world_size / tp + 1) * tp,
                          ") or choose a tp that divides ", world_size));
  }
  return GridShape{world_size / tp, tp};
}

namespace {
int comm_size(MPI_Comm comm) {
  int size = 1;
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  return size;
}
int comm_rank(MPI_Comm comm) {
  int rank = 0;
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  return rank;
}
}  // namespace

ProcessGrid::ProcessGrid(const Runtime& runtime, int tp, MPI_Comm base)
    : shape_(validate_grid(comm_size(base), tp)), world_rank_(comm_rank(base)), base_(base) {
  (void)runtime;
  // tp innermost: consecutive world ranks share a tp group, so with tp dividing the ranks per
  // node the (bandwidth-hungry) tensor-parallel traffic stays on the node.
  tp_rank_ = world_rank_ % shape_.tp;
  dp_rank_ = world_rank_ / shape_.tp;
  HPCTRAIN_MPI_CHECK(MPI_Comm_split(base_, dp_rank_, tp_rank_, &tp_comm_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_split(base_, tp_rank_, dp_rank_, &dp_comm_));

  // A tp group lies within a node if all its members report the same node leader.
  MPI_Comm node = MPI_COMM_NULL;
  HPCTRAIN_MPI_CHECK(
      MPI_Comm_split_type(base_, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node));
  int leader_world_rank = world_rank_;
  HPCTRAIN_MPI_CHECK(MPI_Bcast(&leader_world_rank, 1, MPI_INT, 0, node));  // node's first rank
  MPI_Comm_free(&node);
  int lo = leader_world_rank;
  int hi = leader_world_rank;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, tp_comm_));
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, tp_comm_));
  int inside = lo == hi ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &inside, 1, MPI_INT, MPI_MIN, base_));
  tp_within_node_ = inside == 1;
  if (!tp_within_node_ && base_ == MPI_COMM_WORLD) {
    log::warn(str("tensor-parallel groups span nodes (", describe(),
                  "): each group is tp consecutive world ranks, and here they are not on one node, "
                  "so every layer's tensor-parallel all-reduce crosses the network. Place ranks in "
                  "blocks (srun -m block, the default; mpirun --map-by slot) with ranks per node a "
                  "multiple of tp = ",
                  shape_.tp, ", not cyclically (srun -m cyclic, mpirun --map-by node)"));
  }
}

ProcessGrid::~ProcessGrid() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (tp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&tp_comm_);
  if (dp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&dp_comm_);
}

std::string ProcessGrid::describe() const {
  return str("dp=", shape_.dp, " x tp=", shape_.tp);
}

}  // namespace hpctrain::runtime
