#pragma once
// The trainer's side of checkpointing: which tensors make up the training state, how a resume
// restores it, and the wall-time deadline that decides when a run must save and stop.
// Private to the train layer.

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::model {
class Model;
}
namespace hpctrain::parallel {
class DataParallelStrategy;
}

namespace hpctrain::train {

class Optimizer;

/// What a load writes that is not the live state: the packed optimizer state of a sharded run
/// and the logical (layout) tensors a load writes into, pairwise, and the parameters' layout
/// tensor under full sharding: restore_sharded_state copies each rank's part back.
struct ShardedState {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> state;
  torch::Tensor parameters;
};

/// The training state as checkpoint records: "model/<name>" for every parameter and
/// "optimizer/<state>/<name>" for every optimizer buffer, as live views (save copies them with
/// SaveContent::copy; load writes into them in place), and "model/<name>" for every buffer
/// (copies of them with `snapshot_buffers`, for a save: forward updates buffers).
/// Whatever the data-parallel strategy `dp`, the records are logical tensors: for a save
/// (`load_targets` null) every rank's chunks of the optimizer state are gathered into a full
/// copy (and, under parallel.shard: full, the parameters copied), so the checkpoint does not
/// depend on sharding or the dp size; for a load they are tensors in the strategy's layout,
/// listed in `load_targets` with the packed state they belong to. Call dp.parameters_ready()
/// first. Collective over the dp group when sharded; local otherwise.
std::vector<checkpoint::TensorRecord> state_records(model::Model& model,
                                                    parallel::DataParallelStrategy& dp,
                                                    Optimizer& optimizer, bool with_optimizer,
                                                    bool snapshot_buffers = false,
                                                    ShardedState* load_targets = nullptr);

/// Removes from `records` the parameters (and their optimizer state) that `model` holds as the
/// non-primary copy of a parameter another pipeline stage holds too (model::StageCopy): that
/// stage saves them; a load still fills this stage's copy from them. Local.
void drop_stage_copies(std::vector<checkpoint::TensorRecord>& records, const model::Model& model);

/// After a load into state_records(..., &targets): copies this rank's part of each loaded
/// logical tensor into the optimizer's packed state, and the loaded parameters into the
/// strategy's storage (DataParallelStrategy::parameters_written). Local.
void restore_sharded_state(ShardedState& targets, parallel::DataParallelStrategy& dp);

/// When the run must stop to leave time for a final save: run.time_limit from the start of the
/// process and, under Slurm, the job's end time (asked of squeue by world rank 0 and broadcast).
class Deadline {
 public:
  /// Collective over `world` (rank 0 asks Slurm, every rank learns its answer).
  Deadline(double time_limit_s, double margin_s, comm::ControlPlane& world);
  /// Whether the time left is less than `save_seconds` plus the margin. Local.
  bool reached(double save_seconds) const;
  /// Seconds left, or nullopt without a deadline. Local.
  std::optional<double> seconds_left() const;
  /// "run.time_limit" or "the Slurm job's time limit". Local.
  const std::string& source() const { return source_; }

 private:
  std::optional<std::chrono::steady_clock::time_point> end_;
  double margin_s_;
  std::string source_;
};

}  // namespace hpctrain::train
