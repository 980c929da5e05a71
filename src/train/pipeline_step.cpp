#include "pipeline_step.hpp"

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/device_copy.hpp"
#include "hpctrain/comm/environment.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "trainer_steps.hpp"

namespace hpctrain::train {

model::PipelinePart pipeline_part(const TrainConfig& cfg, int pp_rank) {
  model::PipelinePart part;
  part.pp = cfg.parallel.pp;
  part.virtual_stages = cfg.parallel.pp_virtual;
  part.rank = pp_rank;
  part.layers = cfg.parallel.pp_layers;
  return part;
}

plan::PipelineShape pipeline_shape(const TrainConfig& cfg, bool forward_only) {
  plan::PipelineShape shape;
  shape.pp = cfg.parallel.pp;
  shape.virtual_stages = cfg.parallel.pp_virtual;
  shape.micro_batches = forward_only ? 1 : cfg.optim.grad_accumulation;
  shape.kind = forward_only ? plan::PipelineScheduleKind::kOneFOneB : cfg.parallel.pp_schedule;
  if (forward_only && shape.virtual_stages > 1)
    shape.kind = plan::PipelineScheduleKind::kInterleaved;
  shape.forward_only = forward_only;
  return shape;
}

namespace {

// One evaluation batch is one micro-batch: it runs exactly the operations it runs without
// stages, so the metrics are the same bits. An interleaved schedule passes micro-batches through
// the chunks in groups of pp, so with V > 1 the batch travels with pp - 1 empty micro-batches
// (zero rows: no compute, empty messages).
plan::PipelineSchedule eval_schedule_for(const TrainConfig& cfg) {
  plan::PipelineShape shape = pipeline_shape(cfg, /*forward_only=*/true);
  if (shape.virtual_stages > 1) shape.micro_batches = shape.pp;
  return plan::make_pipeline_schedule(shape);
}

}  // namespace

PipelineStep::PipelineStep(Parts parts)
    : p_(parts),
      part_(pipeline_part(parts.cfg, parts.env.grid.pp_rank())),
      schedule_(plan::make_pipeline_schedule(pipeline_shape(parts.cfg))),
      eval_schedule_(eval_schedule_for(parts.cfg)),
      executor_(parts.env.comms.pp, parts.device) {}

void PipelineStep::run(std::vector<data::Batch>& micro, double loss_scale, bool inject_nan,
                       StepResult& r, model::LossOutput& device_sums, PhaseSeconds& phases) {
  const int k_total = static_cast<int>(micro.size());
  const int last_stage = part_.stages() - 1;
  const at::ScalarType autocast = autocast_dtype(p_.cfg.run.precision);
  parallel::PipelineStage stage;
  stage.activation_shape = [&](int m) {
    return p_.model.stage_activation_shape(micro[static_cast<std::size_t>(m)].inputs);
  };
  stage.forward = [&](int m, int chunk, const torch::Tensor& input) {
    runtime::position::set_phase(runtime::Phase::kForward);  // on the heartbeat (hangs)
    data::Batch& batch = micro[static_cast<std::size_t>(m)];
    const int model_stage = part_.stage_of_chunk(chunk);
    torch::Tensor x = input;
    if (model_stage == 0) {
      comm::DeviceCopier::wait(batch.ready);  // copied on the copy stream: order after it
      x = batch.inputs.to(p_.device, /*non_blocking=*/true);
    }
    compat::AutocastScope scope(autocast, p_.device);  // forward, loss; off on error
    torch::Tensor out = p_.model.forward_chunk(chunk, x);
    if (model_stage != last_stage) return out;
    comm::DeviceCopier::wait(batch.ready);
    return micro_batch_loss(p_.model.loss(out, batch.targets.to(p_.device, /*non_blocking=*/true)),
                            inject_nan && m == 0, k_total, loss_scale, r, device_sums);
  };
  // Each chunk's gradients are final after its last micro-batch's backward: the dp buckets are
  // reduced then, while the rest of the schedule runs.
  stage.before_backward = [&](int m, int) {
    runtime::position::set_phase(runtime::Phase::kBackward);
    p_.sync.set_sync_enabled(m == k_total - 1);
  };
  p_.model.train();
  const parallel::PipelineTimes t = executor_.run(schedule_, stage);
  phases.forward += t.forward;
  phases.backward += t.backward;
  phases.pipeline_wait += t.wait;
  phases.pipeline_wall += t.wall;
}

void PipelineStep::share(StepResult& r) {
  std::vector<double> sums{r.loss_sum, r.correct, r.count};
  p_.env.control.pp->reduce(sums, comm::ReduceOp::kSum);
  r.loss_sum = sums[0];
  r.correct = sums[1];
  r.count = sums[2];
}

model::LossOutput PipelineStep::evaluate(const torch::Tensor& inputs, const torch::Tensor& targets,
                                         at::ScalarType autocast) {
  const int last_stage = part_.stages() - 1;
  const int real = 0;  // the one micro-batch with rows (see eval_schedule_for)
  model::LossOutput out;
  parallel::PipelineStage stage;
  auto rows = [&](int m) { return m == real ? inputs : inputs.narrow(0, 0, 0); };
  stage.activation_shape = [&](int m) { return p_.model.stage_activation_shape(rows(m)); };
  stage.forward = [&](int m, int chunk, const torch::Tensor& input) {
    const int model_stage = part_.stage_of_chunk(chunk);
    compat::AutocastScope scope(autocast, p_.device);
    torch::Tensor result = p_.model.forward_chunk(chunk, model_stage == 0 ? rows(m) : input);
    scope.end();
    if (model_stage == last_stage && m == real) {
      out = p_.model.loss(result, targets);
      out.resolve();
    }
    return result;
  };
  executor_.run(eval_schedule_, stage);
  std::vector<double> sums{out.loss_sum, static_cast<double>(out.correct),
                           static_cast<double>(out.count), out.abs_error_sum};
  p_.env.control.pp->reduce(sums, comm::ReduceOp::kSum);
  model::LossOutput shared;
  shared.loss_sum = sums[0];
  shared.correct = static_cast<std::int64_t>(sums[1]);
  shared.count = static_cast<std::int64_t>(sums[2]);
  shared.abs_error_sum = sums[3];
  return shared;
}

}  // namespace hpctrain::train
