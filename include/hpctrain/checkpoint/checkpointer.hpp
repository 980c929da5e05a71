#pragma once
// A training run's checkpointing behind one call per step: the schedule (when to save), the
// manager (the save in flight, written in the background), and one record per committed save.
// The training loop brings what every rank agreed after a step (comm::StopRequest); the
// checkpointer collects a background save that every rank has finished writing (so a failed save,
// a full disk, ends the run at the step its writing ended, not at the next save), records it,
// and saves when the schedule says so. The loop owns nothing of the asynchronous lifecycle.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/checkpoint/checkpoint_schedule.hpp"
#include "hpctrain/comm/stop_agreement.hpp"

namespace hpctrain::checkpoint {

/// What to do after a step, from agreed values only: the same on every rank.
struct StepDecision {
  /// A background save that every rank has finished writing: collect its outcome (or its error)
  /// now, without waiting.
  bool collect = false;
  /// Save this step (after collecting a save still in flight), and why; kNone: no save.
  SaveReason save = SaveReason::kNone;
  bool operator==(const StepDecision& o) const { return collect == o.collect && save == o.save; }
};

/// The decision after `step`: `agreed` is the step's agreed request (a finished background save,
/// a due time-based save), `last_step` says no step follows (the budget is spent or the run
/// stops), `stop_save` that an agreed stop must save to be resumed (signal, deadline). Local
/// (pure).
StepDecision decide_after_step(const CheckpointSchedule& schedule, std::int64_t step,
                               const comm::StopRequest& agreed, bool last_step, bool stop_save);

/// A committed save, as the run's metrics record it.
struct CommittedSave {
  std::int64_t step = 0;
  std::string path;
  std::int64_t bytes = 0;
  double save_seconds = 0;      ///< from save() to the commit
  double blocking_seconds = 0;  ///< what save() blocked its caller
};

class Checkpointer {
 public:
  /// The content of a save of `step`, built when a save is decided. Collective over the world
  /// when the state is sharded (state_records gathers it), local otherwise.
  using Content = std::function<SaveContent(std::int64_t step)>;
  /// Called once per committed save, once its outcome is known on every rank. Local.
  using Record = std::function<void(const CommittedSave&)>;

  /// Takes over `manager` (a resume has used it already); the schedule's time interval counts
  /// from now. `resumed_step`: the step of the checkpoint the run resumed from (-1: none).
  /// `guessed_save_seconds`: what a save is assumed to take before the first is timed (the
  /// deadline leaves room for it). Local.
  Checkpointer(std::unique_ptr<CheckpointManager> manager, const CheckpointConfig& config,
               std::int64_t resumed_step, double guessed_save_seconds, Content content);
  ~Checkpointer();

  /// Where committed saves are recorded (a run's metrics log); none before it is set. Local.
  void set_record(Record record) { record_ = std::move(record); }

  /// This rank's part of the step's stop request: a time-based save due by its clock, a save in
  /// flight and whether this rank still writes it. Local.
  void contribute(comm::StopRequest& local) const;
  /// Seconds to leave for a final save before a deadline: the last save's, or the guess. Local.
  double save_estimate() const;

  /// After `step`, with the agreed request (see decide_after_step): collects a finished
  /// background save, records it, and saves when the schedule says so. Throws CheckpointError on
  /// every rank when a save failed. Returns the seconds it spent saving (0 without a save).
  /// Collective over the world.
  double after_step(std::int64_t step, const comm::StopRequest& agreed, bool last_step,
                    bool stop_save);
  /// Saves `step` now for `why` (a resumed run's owed evaluation), as after_step would.
  /// Collective over the world.
  void save(std::int64_t step, SaveReason why);
  /// Waits for the save in flight and records it: the last save is committed before the run
  /// reports its outcome. Collective over the world.
  void finish();
  /// Blocks until a deferred copy of the last save has taken the tensors off the compute path;
  /// returns the seconds it waited. Call before the optimizer modifies them. Local.
  double wait_for_copy() { return manager_->wait_for_copy(); }
  /// Waits for the save in flight (without recording it yet). Collective over the world.
  void wait() { manager_->wait(); }

  /// Seconds saves blocked the loop (handing over, and waiting for the last at finish()). Local.
  double seconds() const { return seconds_; }
  /// Directory of the last committed checkpoint (empty before the first). Local.
  const std::string& last_saved_path() const { return manager_->last_saved_path(); }
  CheckpointManager& manager() { return *manager_; }

 private:
  /// Records the last committed save once. Local.
  void record_committed();

  std::unique_ptr<CheckpointManager> manager_;
  CheckpointSchedule schedule_;
  double guessed_save_seconds_;
  Content content_;
  Record record_;
  std::string recorded_path_;
  double seconds_ = 0;
};

}  // namespace hpctrain::checkpoint
