#pragma once
// Builds a run's parts from its config, in two halves: every check on files and sizes, on every
// rank, before any collective but the startup agreements (bad input: one clear error on every
// rank); then the parts that communicate (the parameter broadcast, the data-parallel machinery,
// the optimizer, the checkpointer and the resume). Private to the train layer.

#include <string>

#include "hpctrain/checkpoint/checkpointer.hpp"
#include "trainer_parts.hpp"

namespace hpctrain {
class Config;
}
namespace hpctrain::comm {
class StartupAgreement;
}

namespace hpctrain::train {

class TrainerBuilder {
 public:
  /// `resume`: "auto", "none" or a checkpoint path (Trainer's constructor). Local.
  TrainerBuilder(Config& config, std::string default_run_dir, std::string resume)
      : config_(config), default_run_dir_(std::move(default_run_dir)), resume_(std::move(resume)) {}

  /// Fills `parts` (whose environment is set): validates, then builds and resumes. `content`
  /// builds a checkpoint's content (the trainer's state at a step). Collective over the world.
  void build(TrainerParts& parts, checkpoint::Checkpointer::Content content);

 private:
  /// Every check on files and sizes, on every rank. Local but for the startup agreements.
  void validate(TrainerParts& p, comm::StartupAgreement& startup);
  /// The data-parallel machinery, the optimizer and the step runner. Collective over the world.
  void build_step(TrainerParts& p);
  /// Restores the state of the checkpoint `resume_` names, if any; returns the checkpoint
  /// manager for the checkpointer. Collective over the world.
  std::unique_ptr<checkpoint::CheckpointManager> resume(TrainerParts& p);

  Config& config_;
  std::string default_run_dir_;
  std::string resume_;
};

}  // namespace hpctrain::train
