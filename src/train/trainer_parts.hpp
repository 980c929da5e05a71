#pragma once
// What a training run is made of, built once by TrainerBuilder (trainer_builder.hpp) and driven by
// Trainer::run: the config, the data, the model, the data-parallel machinery, the optimizer, the
// step runner, the checkpointer and the evaluation schedule. Private to the train layer.

#include <cstdint>
#include <memory>
#include <string>

#include "debug_hooks.hpp"
#include "hpctrain/checkpoint/checkpointer.hpp"
#include "hpctrain/comm/environment.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/sampler.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/data_parallel_strategy.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/train/loss_scaler.hpp"
#include "hpctrain/train/optimizer.hpp"
#include "hpctrain/train/train_config.hpp"
#include "hpctrain/train/trainer.hpp"
#include "pipeline_step.hpp"
#include "text_evaluation.hpp"
#include "trainer_steps.hpp"

namespace hpctrain::train {

/// Every part of a run. Local value type; the environment's runtime and grid outlive it.
struct TrainerParts {
  explicit TrainerParts(comm::Environment e) : env(std::move(e)) {}

  TrainConfig cfg;
  comm::Environment env;
  DebugHooks debug;
  std::string config_text;       ///< the resolved config, stored in run.dir and every checkpoint
  std::int64_t micro_batch = 0;  ///< per rank
  std::int64_t global_batch = 0;
  std::int64_t total_steps = 0;
  std::unique_ptr<data::Dataset> train_data;
  std::unique_ptr<data::Dataset> val_data;
  std::unique_ptr<data::TrainSampler> sampler;
  torch::Device device{torch::kCPU};
  std::shared_ptr<model::Model> model;
  /// The data-parallel strategy (parallel.shard): where parameters, gradients and optimizer
  /// state live and how they are synchronised. Declared after the model, so it goes first.
  std::unique_ptr<parallel::DataParallelStrategy> dp;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;
  std::unique_ptr<PipelineStep> pipeline;  ///< parallel.pp > 1 only
  std::int64_t parameters = 0;             ///< of the logical model (every stage's)
  std::unique_ptr<StepRunner> steps;
  std::unique_ptr<checkpoint::Checkpointer> checkpoints;
  std::unique_ptr<eval::EvalSchedule> evals;
  /// logging.sample_every and eval.tasks (null without either).
  std::unique_ptr<TextEvaluation> text;
  TrainerState state;
  std::string resumed_from;  ///< checkpoint directory, if the run resumed

  bool is_rank0() const { return env.runtime.world_rank() == 0; }
  /// Tokens per sample: the sequence length of a language model's data, else 1. Local.
  std::int64_t tokens_per_sample() const;
};

}  // namespace hpctrain::train
