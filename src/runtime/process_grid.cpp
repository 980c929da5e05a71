#include "hpctrain/runtime/process_grid.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {

GridShape validate_grid(int world_size, int tp, int pp) {
  if (tp < 1) {
    throw ConfigError(str("parallel.tp = ", tp,
                          " is not a valid tensor-parallel size: it must be "
                          "a positive integer (1 turns tensor parallelism off)"));
  }
  if (pp < 1) {
    throw ConfigError(str("parallel.pp = ", pp,
                          " is not a valid pipeline size: it must be a positive integer (1 turns "
                          "pipeline parallelism off)"));
  }
  if (pp == 1 && world_size % tp != 0) {
    throw ConfigError(str("world size ", world_size, " is not divisible by parallel.tp = ", tp,
                          ": the grid is world = dp x tp, so launch a multiple of ", tp,
                          " ranks (e.g. mpirun -np ", (world_size / tp + 1) * tp,
                          ") or choose a tp that divides ", world_size));
  }
  const int model = tp * pp;  // ranks of one model replica
  if (world_size % model != 0) {
    throw ConfigError(str("world size ", world_size,
                          " is not divisible by parallel.pp x parallel.tp = ", pp, " x ", tp, " = ",
                          model, ": the grid is world = dp x pp x tp, so launch a multiple of ",
                          model, " ranks (e.g. mpirun -np ", (world_size / model + 1) * model,
                          ") or choose pp and tp whose product divides ", world_size));
  }
  return GridShape{world_size / model, tp, pp};
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

ProcessGrid::ProcessGrid(const Runtime& runtime, int tp, int pp, MPI_Comm base)
    : shape_(validate_grid(comm_size(base), tp, pp)), world_rank_(comm_rank(base)), base_(base) {
  (void)runtime;
  // tp innermost: consecutive world ranks share a tp group, so with tp dividing the ranks per
  // node the (bandwidth-hungry) tensor-parallel traffic stays on the node; the stages of one
  // replica come next, the replicas outermost.
  tp_rank_ = world_rank_ % shape_.tp;
  pp_rank_ = (world_rank_ / shape_.tp) % shape_.pp;
  dp_rank_ = world_rank_ / (shape_.tp * shape_.pp);
  // With pp = 1 the colours and keys are the dp x tp grid's (dp_rank for tp, tp_rank for dp), so
  // the groups are what they always were.
  const int tp_colour = dp_rank_ * shape_.pp + pp_rank_;
  const int dp_colour = pp_rank_ * shape_.tp + tp_rank_;
  const int pp_colour = dp_rank_ * shape_.tp + tp_rank_;
  HPCTRAIN_MPI_CHECK(MPI_Comm_split(base_, tp_colour, tp_rank_, &tp_comm_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_split(base_, dp_colour, dp_rank_, &dp_comm_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_split(base_, pp_colour, pp_rank_, &pp_comm_));
  HPCTRAIN_MPI_CHECK(
      MPI_Comm_split(base_, dp_rank_, pp_rank_ * shape_.tp + tp_rank_, &model_comm_));

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
  if (pp_comm_ != MPI_COMM_NULL) MPI_Comm_free(&pp_comm_);
  if (model_comm_ != MPI_COMM_NULL) MPI_Comm_free(&model_comm_);
}

std::string ProcessGrid::describe() const {
  if (shape_.pp == 1) return str("dp=", shape_.dp, " x tp=", shape_.tp);
  return str("dp=", shape_.dp, " x pp=", shape_.pp, " x tp=", shape_.tp);
}

}  // namespace hpctrain::runtime
