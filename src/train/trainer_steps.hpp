#pragma once
// Pieces of the training loop kept out of trainer.cpp: one optimizer step (forward, backward,
// gradient synchronisation, clipping, the non-finite check, the update), interval statistics for
// logging, early stopping and input validation. Private to the train layer.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/comm/device_timer.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/progress.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::runtime {
struct ResourceSample;
}
namespace hpctrain::model {
class Model;
struct LossOutput;
}  // namespace hpctrain::model
namespace hpctrain::parallel {
class DataParallelStrategy;
}

namespace hpctrain::train {

class Optimizer;
class LossScaler;
class DebugHooks;
class PipelineStep;

struct StepResult {
  double local_loss = 0;  ///< mean loss of this rank's samples in the step
  double loss_sum = 0;    ///< over this rank's samples (tokens)
  double correct = 0;
  double count = 0;
  double grad_norm = 0;  ///< global (all dp and tp ranks), before clipping
  double lr = 0;
  double comm_wait = 0;
  bool skipped = false;
  double loss_scale = 0;  ///< the loss scale after this step's update (0: no loss scaling)
};

/// One micro-batch's loss as backward takes it, its metric sums added to `r` (host values) and
/// `device_sums` (sums a GPU loss left on the device): made NaN when `inject_nan` (the debug
/// section's nan_step), divided by the step's `k_total` micro-batches and multiplied by
/// `loss_scale` (a power of two: exact; 0: no loss scaling). The plain and the pipeline step
/// share it.
torch::Tensor micro_batch_loss(model::LossOutput out, bool inject_nan, int k_total,
                               double loss_scale, StepResult& r, model::LossOutput& device_sums);

/// Runs optimizer steps. Collective over the world (dp all-reduce of gradients, tp inside the
/// model and for the gradient norm).
class StepRunner {
 public:
  struct Parts {
    model::Model& model;
    /// Gradient synchronisation, the norm's partial sums, clipping, the update's gathers.
    parallel::DataParallelStrategy& dp;
    Optimizer& optimizer;
    LossScaler& scaler;
    comm::Environment& env;
    const TrainConfig& cfg;
    const DebugHooks& debug;  ///< debug.nan_step, debug.overflow_step
    torch::Device device;
    /// Called after backward, before the update phase (the first code that may modify
    /// parameters and optimizer state), returning the seconds it blocked (the checkpoint's
    /// deferred copy; counted as checkpoint time); may be empty.
    std::function<double()> before_update;
    /// With parallel.pp > 1: the schedule that runs the micro-batches through the stages (the
    /// norm then sums over the pp group too); null otherwise.
    PipelineStep* pipeline = nullptr;
  };
  explicit StepRunner(Parts parts);
  /// One optimizer step over `micro` (grad_accumulation micro-batches of this rank). Phase times
  /// go to `phases` at once on CPU; on a GPU they are device times read by resolve_phases.
  StepResult step(std::vector<data::Batch>& micro, std::int64_t step, std::int64_t total_steps,
                  PhaseSeconds& phases);
  /// Adds the device-timed phases (forward, backward, optimizer, exposed communication) of the
  /// steps since the last call to `phases`; on a GPU this waits for the device once. Call at
  /// logging intervals and before the ledger is written. Local.
  void resolve_phases(PhaseSeconds& phases);
  /// Whether step() adds its phase times to `phases` at once (host timing, CPU) rather than at
  /// resolve_phases (device events). Local.
  bool host_timed() const { return !timer_.uses_events(); }

 private:
  /// Forward and backward of micro-batch `k` of `k_total` (the step's `step`, losses scaled by
  /// `scale`; `inject_nan`: debug.nan_step); its sums go to `r` or, left on the device, to
  /// `device_sums`. Returns the seconds its gradient reduction waited (sharded gradients).
  /// Collective over the dp group (as the strategy's hooks are).
  double micro_batch(data::Batch& batch, int k, int k_total, std::int64_t step, double scale,
                     bool inject_nan, StepResult& r, model::LossOutput& device_sums);
  /// Skips a step whose gradients are not finite (backing off the loss scale), or ends the job
  /// as optim.on_nonfinite says. `optimizer_mark`: the timer mark of the optimizer phase.
  /// Collective over the world.
  void skip_nonfinite(StepResult& r, std::int64_t step, int optimizer_mark, PhaseSeconds& phases);
  double global_grad_norm();
  /// The optimizer update and, when sharded, the all-gather of the updated parameters (counted
  /// in the optimizer phase). Collective over the dp group when sharded.
  void update(double lr);
  /// True when the gradients are not finite on any rank (agreed over the world on the control
  /// plane, so that every rank acts alike). Collective over the world.
  bool nonfinite(double grad_norm);
  /// Ends the job for non-finite gradients: `what` + which rank's loss was not finite + `advice`,
  /// as an agreed error (printed once, exit 6 on every rank). Collective over the world.
  [[noreturn]] void stop_nonfinite(const std::string& what, const std::string& advice,
                                   double local_loss);

  Parts p_;
  comm::DeviceTimer timer_;  // phase times without per-phase synchronize
};

/// Sums over the steps between two log lines.
struct IntervalStats {
  /// Wall time of the interval's training steps (data wait included; evaluations, checkpoint
  /// saves and logging between steps excluded), as the ledger's training throughput counts it.
  double seconds = 0;
  double loss_sum = 0;
  double correct = 0;
  double count = 0;
  double samples = 0;
  std::int64_t steps = 0;
  double comm_wait = 0;
  double data_wait = 0;
  double grad_norm = 0;
  double lr = 0;
  std::int64_t skipped = 0;
  double loss_scale = 0;  ///< after the interval's last step; 0 without loss scaling
  void add(const StepResult& r, std::int64_t global_batch, double step_seconds);
  /// Training samples per second of the interval so far (0 before the first step).
  double samples_per_second() const { return seconds > 0 ? samples / seconds : 0; }
};

/// Reduces the interval over the dp group and writes a train record, with the fields of `extra`
/// added (resources), and (plain mode) a line. Collective over the dp group.
void log_interval(IntervalStats& interval, std::int64_t step, std::int64_t epoch,
                  comm::ControlPlane& dp, RunLog& runlog,
                  const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

/// Throughput fields of a train record besides samples/s: "tokens_per_s" (language models),
/// "model_flops_per_s" (training FLOPs per second over the whole job: 3 x forward FLOPs per
/// sample x samples/s) and, with a peak per device, "mfu" (that per rank over the peak). Local.
nlohmann::ordered_json throughput_fields(double samples_per_s, double forward_flops_per_sample,
                                         std::int64_t tokens_per_sample, int world_size,
                                         double peak_flops_per_device);

/// The "resources" field of a train record: min, mean and max over the world of each rank's CPU
/// utilisation (percent of one core), resident memory and its peak, and, where measured on every
/// rank, device utilisation and memory. Collective over `world`.
nlohmann::ordered_json resource_fields(const runtime::ResourceSample& mine,
                                       comm::ControlPlane& world);

/// "eval at step 400: loss 0.3312, accuracy 0.8812 (10000 samples, 2.1 s, 4700 samples/s)".
std::string eval_line(const eval::EvalResult& r, std::int64_t step);

}  // namespace hpctrain::train
