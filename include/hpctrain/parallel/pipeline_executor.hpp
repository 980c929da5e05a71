#pragma once
// Runs one rank's list of a pipeline schedule (plan/pipeline_schedule.hpp, docs/PIPELINE.md):
// forwards and backwards of micro-batches on this rank's model chunks, and the activations and
// their gradients between stages as point-to-point batches on the pp group's data plane
// (Communicator::send_recv_async). The schedule is data computed elsewhere; the executor only
// follows it, so what the unit test of the library proves about a schedule (every send meets its
// receive, no deadlock) holds for the run. What a stage computes comes from the caller
// (PipelineStage): the trainer's forward and loss, the evaluator's forward and metrics.
//
// A batch with a receive is waited for before the next action (its tensor is needed next); a
// batch of sends only is not: its tensors are kept until the end of the run, and the
// communicator's order keeps it before the next batch. The time spent waiting for receives is the
// bubble as this rank sees it (docs/PIPELINE.md, "Measuring the bubble").

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/comm/device_timer.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"

namespace hpctrain::parallel {

/// What this rank's stages compute, for the executor.
struct PipelineStage {
  /// Forward of micro-batch `micro_batch` on this rank's chunk `chunk`. `input` is undefined on
  /// the model's first stage (the callee takes the micro-batch's inputs) and the previous stage's
  /// output otherwise (requiring grad when training). Returns the output for the next stage, or on
  /// the last stage the loss backward starts from (a scalar; anything, for a forward-only run).
  std::function<torch::Tensor(int micro_batch, int chunk, const torch::Tensor& input)> forward;
  /// The shape of what travels between stages for micro-batch `micro_batch` (activations
  /// forward, their gradients backward).
  std::function<std::vector<std::int64_t>(int micro_batch)> activation_shape;
  /// Called just before the backward of (micro_batch, chunk); may be empty.
  std::function<void(int micro_batch, int chunk)> before_backward;
};

/// Seconds of one run: forward and backward on the host clock (the time to queue them on a GPU);
/// wait and wall on the host clock on the CPU, and on a GPU from events on the compute stream
/// (the host does not wait at a receive there).
struct PipelineTimes {
  double forward = 0;   ///< in PipelineStage::forward
  double backward = 0;  ///< in backward
  double wait = 0;      ///< waiting for received activations and gradients: the bubble
  double wall = 0;      ///< the whole run
};

class PipelineExecutor {
 public:
  /// `pp`: the pipeline group (its rank is this rank's pp rank). Activations travel as
  /// `activation_dtype` on `device`. Local.
  PipelineExecutor(std::shared_ptr<comm::Communicator> pp, torch::Device device,
                   torch::ScalarType activation_dtype = torch::kFloat);

  /// Runs this rank's actions of `schedule` (whose shape's pp is the group's size) with `stage`.
  /// Collective over the pp group: every rank runs the same schedule. Throws Error for a schedule
  /// of another pipeline size.
  PipelineTimes run(const plan::PipelineSchedule& schedule, const PipelineStage& stage);

 private:
  std::shared_ptr<comm::Communicator> pp_;
  torch::Device device_;
  torch::ScalarType dtype_;
  int lane_ = 0;  // trace lane of this rank's stages
  // On a GPU: the bubble and the span timed on the compute stream (kDeviceWait, kDeviceWall).
  static constexpr int kDeviceWait = 0;
  static constexpr int kDeviceWall = 1;
  std::unique_ptr<comm::DeviceTimer> device_timer_;
};

}  // namespace hpctrain::parallel
