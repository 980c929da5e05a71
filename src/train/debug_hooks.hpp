#pragma once
// The `debug` section's test hooks behind one object: the training code asks it whether to act
// as if a signal arrived, to poison a step, or to hold memory, and never reads the section
// itself. Every hook is off by default. Private to the train layer.

#include <cstdint>
#include <vector>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain::train {

class DebugHooks {
 public:
  DebugHooks() = default;
  /// The hooks of `debug` as world rank `world_rank` runs them. Local.
  DebugHooks(const DebugSection& debug, int world_rank) : debug_(debug), world_rank_(world_rank) {}

  /// debug.stop_step (and stop_rank): the signal this rank acts on after `step` as if it had
  /// received it (SIGUSR1), else `received`. Local.
  int stop_signal(std::int64_t step, int received) const;
  /// debug.stop_eval_step: requests a stop (as SIGUSR1 would) as the evaluation of `step`
  /// starts. Local.
  void at_evaluation(std::int64_t step) const;
  /// debug.nan_step / nan_rank: this rank's loss of `step` becomes NaN. Local.
  bool nan_loss(std::int64_t step) const {
    return debug_.nan_step == step && debug_.nan_rank == world_rank_;
  }
  /// debug.overflow_step / overflow_rank: this rank's gradients of `step` become infinite after
  /// their all-reduce. Local.
  bool overflow(std::int64_t step) const {
    return debug_.overflow_step == step && debug_.overflow_rank == world_rank_;
  }
  /// debug.fail_step / fail_rank: this rank fails alone (an Error, exit 1) before `step` (0:
  /// before the step loop). Local.
  void fail_at(std::int64_t step) const;
  /// debug.desync_step / desync_rank: this rank enters a world barrier the others do not enter
  /// (a desynchronised program) after `step`, before the stop agreement. Collective on the
  /// chosen rank only.
  void desync(std::int64_t step, comm::ControlPlane& world) const;
  /// debug.stage_inputs: the GPU step path on CPU (staged inputs, metric sums read after the
  /// norm). Local.
  bool stage_inputs() const { return debug_.stage_inputs; }
  /// How the loader hands batches over on `cuda` or not: pinned for a GPU, a staged copy with
  /// debug.stage_inputs, else as read. Local.
  data::InputStaging input_staging(bool cuda) const;
  /// debug.extra_memory_mb: touches and holds that much memory until the hooks are destroyed
  /// (the recorded peak must rise by it). Local.
  void hold_memory();

 private:
  bool stop_rank_matches() const { return debug_.stop_rank < 0 || debug_.stop_rank == world_rank_; }
  DebugSection debug_;
  int world_rank_ = 0;
  std::vector<char> memory_;
};

}  // namespace hpctrain::train
