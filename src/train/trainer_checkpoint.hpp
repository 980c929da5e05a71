#pragma once
// The trainer's side of checkpointing: which tensors make up the training state, how a resume
// restores it, and the wall-time deadline that decides when a run must save and stop.
// Private to the train layer.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::model {
class Model;
}
namespace hpctrain::parallel {
class FlatParameters;
}

namespace hpctrain::train {

class Optimizer;

/// The training state as checkpoint records: "model/<name>" for every parameter and
/// "optimizer/<state>/<name>" for every optimizer buffer, as live views (save copies them with
/// SaveContent::copy; load writes into them in place), and "model/<name>" for every buffer
/// (copies of them with `snapshot_buffers`, for a save: forward updates buffers). Local.
std::vector<checkpoint::TensorRecord> state_records(model::Model& model,
                                                    parallel::FlatParameters& flat,
                                                    Optimizer& optimizer, bool with_optimizer,
                                                    bool snapshot_buffers = false);

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
