#pragma once
// What a training run leaves for people and tools besides checkpoints: metrics.jsonl and the
// progress output (RunLog), the compute ledger (ledger.json) and the completion marker
// (training_complete.json) that `hpctrain eval --watch` waits for. Private to the train layer.

#include <cstdint>
#include <string>

#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/progress.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::train {

class RunReport {
 public:
  /// `rank0`: this rank writes. `resume_step`: the step the run starts at (0: metrics.jsonl
  /// starts anew; else records of later steps are moved aside, see RunLog). Local.
  RunReport(bool rank0, const std::string& run_dir, ProgressMode progress, std::int64_t total_steps,
            std::int64_t resume_step);

  RunLog& log() { return log_; }

  /// More steps are coming: a completion marker of an earlier (shorter) run must go. Local.
  void clear_completion();
  /// Ends the run's report: builds the ledger from every rank's phases (collective over
  /// `world`), and on rank 0 writes ledger.json, the end record, the summary lines and, when the
  /// run completed (exit code 0), the completion marker naming `last_checkpoint`. A ledger that
  /// cannot be written is reported, named in the reason, and makes the exit code 1 (training and
  /// its checkpoints are complete; the run's account is not). Collective.
  void finish(TrainOutcome& outcome, const PhaseSeconds& phases, const LedgerFacts& facts,
              const std::string& last_checkpoint, comm::ControlPlane& world);
  /// A restart found the run complete (its final checkpoint is at `step`): the job that saved it
  /// may have died before its bookkeeping. Writes whatever is missing, the completion marker
  /// and a ledger reconstructed from the checkpoint (its timings are lost; it says so). Local
  /// (rank 0 writes).
  void finish_completed(std::int64_t step, const LedgerFacts& facts,
                        const std::string& last_checkpoint);

 private:
  void write_marker(std::int64_t step, const std::string& reason,
                    const std::string& last_checkpoint);

  bool rank0_;
  std::string run_dir_;
  RunLog log_;
};

}  // namespace hpctrain::train
