#pragma once
// The forwards and backwards of one optimizer step through pipeline stages (parallel.pp > 1,
// docs/PIPELINE.md): the schedule of parallel.pp_schedule over optim.grad_accumulation
// micro-batches, computed once by the plan library and run by parallel::PipelineExecutor. What a
// stage computes is the model's forward_chunk; the last stage adds the loss (scaled for
// accumulation and loss scaling, as StepRunner does without stages) and keeps its sums, which
// share() then gives every stage. Evaluation runs each batch through a forward-only schedule.
// Private to the train layer.

#include <memory>
#include <vector>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/pipeline_executor.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain::comm {
struct Environment;
}
namespace hpctrain::parallel {
class GradientSynchronizer;
}

namespace hpctrain::train {

struct StepResult;

class PipelineStep {
 public:
  struct Parts {
    model::Model& model;  ///< this rank's stages (model::PipelinePart)
    parallel::GradientSynchronizer& sync;
    comm::Environment& env;
    const TrainConfig& cfg;
    torch::Device device;
  };
  /// Builds the step's schedule (the shape was validated with the config). Local.
  explicit PipelineStep(Parts parts);

  /// Runs this rank's part of the step over `micro` (optim.grad_accumulation micro-batches, the
  /// same on every stage of the pipeline): forwards, backwards (the gradient synchronizer
  /// enabled for each chunk's last micro-batch), activations and gradients to and from the
  /// neighbouring stages. The last stage's loss is multiplied by `loss_scale` (0: none) and, on
  /// micro-batch 0 with `inject_nan`, made NaN; its metric sums go to `r` (host values) and
  /// `device_sums` (sums a GPU loss left on the device). Adds the compute and the waits to
  /// `phases`. Collective over the pp group (and the tp group inside the model).
  void run(std::vector<data::Batch>& micro, double loss_scale, bool inject_nan, StepResult& r,
           model::LossOutput& device_sums, PhaseSeconds& phases);
  /// Gives every stage the last stage's loss and metric sums in `r` (others contribute zeros, so
  /// the sum is exact). Collective over the pp group's control channel.
  void share(StepResult& r);
  /// Loss and metric sums of one evaluation batch through a forward-only schedule (one
  /// micro-batch), known on every stage. Collective over the pp group.
  model::LossOutput evaluate(const torch::Tensor& inputs, const torch::Tensor& targets,
                             at::ScalarType autocast_dtype);

  const plan::PipelineSchedule& schedule() const { return schedule_; }

 private:
  Parts p_;
  model::PipelinePart part_;
  plan::PipelineSchedule schedule_;
  plan::PipelineSchedule eval_schedule_;
  parallel::PipelineExecutor executor_;
};

/// This rank's part of the pipeline of `cfg` on `grid`'s pp rank. Local.
model::PipelinePart pipeline_part(const TrainConfig& cfg, int pp_rank);

/// The schedule shape of `cfg`: parallel.pp x pp_virtual, optim.grad_accumulation micro-batches.
/// Local.
plan::PipelineShape pipeline_shape(const TrainConfig& cfg, bool forward_only = false);

}  // namespace hpctrain::train
