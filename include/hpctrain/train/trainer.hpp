#pragma once
// The training loop: data-parallel (and tensor-parallel) training of a model from the config,
// with periodic distributed evaluation, metrics, the compute ledger, checkpoints and clean stops.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "hpctrain/comm/environment.hpp"
#include "hpctrain/data/sampler.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain {
class Config;
namespace runtime {
class Runtime;
class ProcessGrid;
}  // namespace runtime
}  // namespace hpctrain

namespace hpctrain::train {

/// Everything a resume needs besides tensors; saved in checkpoints as JSON.
struct TrainerState {
  std::int64_t step = 0;  ///< optimizer steps completed
  data::SamplerState sampler;
  std::int64_t skipped_steps = 0;  ///< non-finite steps skipped (optim.on_nonfinite = skip)
  eval::EvalProgress eval;         ///< early stopping, and an evaluation a stop interrupted
  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& j);
};

/// How a run ended.
struct TrainOutcome {
  std::int64_t steps = 0;
  std::string reason;  ///< "completed", "early stopping", "SIGUSR1", "time limit", ...
  int exit_code = 0;   ///< 0, or kExitRequeue when stopped to be resumed
};

class Trainer {
 public:
  /// Reads and validates the whole config, opens the datasets and builds the model. Every check
  /// that can fail on bad input runs here, on every rank, before the first collective.
  /// `resume`: "auto" (latest checkpoint of run.dir if any), "none", or a checkpoint path.
  /// Local until the end, where parameters are broadcast over the dp group (collective).
  Trainer(Config& config, const std::string& default_run_dir, comm::Environment env,
          const std::string& resume = "auto");
  ~Trainer();

  /// Trains until the step budget, early stopping, or an agreed stop request; evaluates and
  /// saves as configured. Collective over the world.
  TrainOutcome run();

  const TrainConfig& config() const;
  /// This rank's parameters by state_dict name (shards when tensor parallel; the float32 masters
  /// under parallel.shard: full). Tests compare them across runs. Collective over the dp group
  /// where the parameters are sharded (they are gathered); local otherwise.
  std::vector<std::pair<std::string, torch::Tensor>> local_parameters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctrain::train
