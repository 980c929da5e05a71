#include "trainer_steps.hpp"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <limits>
#include <thread>

#include "debug_hooks.hpp"
#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/device_copy.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/data_parallel_strategy.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/resource_monitor.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "hpctrain/train/loss_scaler.hpp"
#include "hpctrain/train/optimizer.hpp"
#include "pipeline_step.hpp"

namespace hpctrain::train {

using Clock = std::chrono::steady_clock;

namespace {
// DeviceTimer slots.
constexpr int kForward = 0;
constexpr int kBackward = 1;
constexpr int kOptimizer = 2;
constexpr int kCommWait = 3;

// The square root of a sum of squares whose corrections may round it below zero. NaN stays NaN
// (std::max(0.0, NaN) is 0.0, which would hide a non-finite gradient from the skip and stop).
double root_of_square_sum(double sq) {
  return std::sqrt(sq < 0 ? 0.0 : sq);
}

// debug.slow_*: a straggler for tests, as a slower processor would be: the rank computes (spins)
// for `ms` milliseconds of its own CPU time in forward.
void slow_compute(double ms) {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  const double until = static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9 + ms / 1000;
  volatile double sink = 0;
  for (;;) {
    for (int i = 0; i < 10000; ++i) sink = sink + 1e-9;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    if (static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9 >= until) break;
  }
}

// debug.hang_*: this rank stops in backward for good, as a hung or stopped process would (the
// collective watchdog of the others ends the job).
void hang_in_backward(bool stop_process) {
  log::rank_warn("debug.hang_step: this rank stops in backward now (a test of hang attribution)");
  if (stop_process) std::raise(SIGSTOP);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}
}  // namespace

StepRunner::StepRunner(Parts parts)
    : p_(parts), timer_(parts.device.is_cuda(), parts.device.index()) {}

void StepRunner::resolve_phases(PhaseSeconds& phases) {
  const auto t = timer_.resolve();
  phases.forward += t[kForward];
  phases.backward += t[kBackward];
  phases.optimizer += t[kOptimizer];
  // On CPU the finalizer's own wait is the exposed communication (added per step); with device
  // events it is the compute stream's wait for the communication stream.
  if (timer_.uses_events()) phases.comm_wait += t[kCommWait];
}

double StepRunner::global_grad_norm() {
  // The strategy's part (summed over the dp group where the gradients are divided), then over
  // the tp group (sharded parameters are disjoint pieces of the logical gradient; replicated
  // ones were counted 1/tp times), then over the pipeline's stages (a parameter two stages hold
  // counts on the stage that saves it).
  double sq = p_.dp.grad_square_sum();
  if (p_.env.grid.tp_size() > 1) sq = p_.env.control.tp->sum(sq);
  if (p_.env.grid.pp_size() > 1) sq = p_.env.control.pp->sum(sq);
  return root_of_square_sum(sq);
}

bool StepRunner::nonfinite(double grad_norm) {
  // Data-parallel gradients are identical after their all-reduce and the norm is summed over tp,
  // so every rank normally sees the same answer. A rank-local fault would not: the world agrees
  // (one host all-reduce of a flag), so that every rank skips, backs off, or stops with one
  // message (stop_nonfinite) alike.
  return p_.env.control.world->any(!std::isfinite(grad_norm));
}

void StepRunner::stop_nonfinite(const std::string& what, const std::string& advice,
                                double local_loss) {
  // Which ranks' losses were not finite: one more agreement, on the way out only. In a pipeline
  // the last stage computes the loss and shares it with the others: only its ranks are named.
  const runtime::ProcessGrid& grid = p_.env.grid;
  const bool computes_loss = grid.pp_rank() == grid.pp_size() - 1;
  const auto first = p_.env.control.world->first_problem(
      !computes_loss || std::isfinite(local_loss) ? std::string() : str(local_loss));
  const std::string loss_note =
      first ? str("the loss was ", first->second, " on rank ", first->first,
                  p_.env.runtime.world_size() > 1 ? ", the lowest such rank" : "")
            : std::string("the loss was finite on every rank");
  // Raised by every rank at once: printed once, and every rank ends with the code by itself.
  throw AgreedError(str(what, " (", loss_note, ")", advice), kExitNonFinite);
}

void StepRunner::update(double lr) {
  p_.dp.before_update();
  p_.optimizer.step(lr);
  p_.dp.after_update();
}

torch::Tensor micro_batch_loss(model::LossOutput out, bool inject_nan, int k_total,
                               double loss_scale, StepResult& r, model::LossOutput& device_sums) {
  torch::Tensor loss = out.loss;
  if (inject_nan) {
    loss = loss * std::nan("");
    out.loss_sum = std::nan("");
    if (out.pending.defined()) {
      out.pending = out.pending.clone();
      out.pending[0].fill_(std::nan(""));
    }
  }
  if (k_total > 1) loss = loss / static_cast<double>(k_total);
  if (loss_scale > 0) loss = loss * loss_scale;  // a power of two: exact
  r.loss_sum += out.loss_sum;
  r.correct += static_cast<double>(out.correct);
  r.count += static_cast<double>(out.count);
  // Sums left on the device (a GPU) are added there and read after the gradient norm.
  if (out.pending.defined()) {
    device_sums.pending =
        device_sums.pending.defined() ? device_sums.pending + out.pending : out.pending;
  }
  return loss;
}

double StepRunner::micro_batch(data::Batch& batch, int k, int k_total, std::int64_t step,
                               double scale, bool inject_nan, StepResult& r,
                               model::LossOutput& device_sums) {
  namespace trace = runtime::trace;
  const at::ScalarType autocast_dtype = hpctrain::autocast_dtype(p_.cfg.run.precision);
  torch::Tensor inputs, targets;
  {
    trace::Scope traced(0, "input copy");
    comm::DeviceCopier::wait(batch.ready);  // copied on the copy stream: order after it
    inputs = batch.inputs.to(p_.device, /*non_blocking=*/true);
    targets = batch.targets.to(p_.device, /*non_blocking=*/true);
  }
  auto t0 = Clock::now();
  runtime::position::set_phase(runtime::Phase::kForward);
  const int m0 = timer_.mark();
  p_.dp.before_forward(k == 0);  // a fully sharded model's root is gathered
  if (p_.cfg.debug.slow_ms > 0 && p_.cfg.debug.slow_rank == p_.env.runtime.world_rank()) {
    slow_compute(p_.cfg.debug.slow_ms);
  }
  model::LossOutput out;
  {
    compat::AutocastScope autocast(autocast_dtype, p_.device);  // forward, loss; off on error
    auto outputs = p_.model.forward(inputs);
    out = p_.model.loss(outputs, targets);
  }
  torch::Tensor loss = micro_batch_loss(std::move(out), inject_nan && k == 0, k_total,
                                        p_.scaler.enabled() ? scale : 0, r, device_sums);
  const int m1 = timer_.mark();
  timer_.add(kForward, m0, m1);
  if (trace::on()) trace::record(0, "forward", t0, Clock::now());

  auto t1 = Clock::now();
  runtime::position::set_phase(runtime::Phase::kBackward);
  p_.dp.before_backward(k == k_total - 1);
  loss.backward();
  if (p_.cfg.debug.hang_step == step + 1 && p_.cfg.debug.hang_rank == p_.env.runtime.world_rank()) {
    hang_in_backward(p_.cfg.debug.hang_stop);
  }
  timer_.add(kBackward, m1, timer_.mark());
  if (trace::on()) trace::record(0, "backward", t1, Clock::now());
  return p_.dp.after_backward();
}

void StepRunner::skip_nonfinite(StepResult& r, std::int64_t step, int optimizer_mark,
                                PhaseSeconds& phases) {
  if (p_.scaler.enabled()) {
    // Loss scaling: an overflow is expected now and then; skip the step and back off.
    const double before = p_.scaler.scale();
    p_.scaler.update(/*nonfinite=*/true);
    r.loss_scale = p_.scaler.scale();
    if (p_.scaler.below_min() && p_.cfg.optim.on_nonfinite == NonFinitePolicy::kStop) {
      stop_nonfinite(
          str("non-finite gradients at step ", step, " with the loss scale already at ", before),
          str(": it fell below optim.loss_scale_min = ", p_.cfg.optim.loss_scale.min,
              ", so the gradients are not finite for another reason than float16 range. Lower "
              "optim.lr, enable optim.grad_clip, check the data, or try run.precision=bf16"),
          r.local_loss);
    }
    log::debug(str("step ", step, ": non-finite gradients, loss scale ", before, " -> ",
                   r.loss_scale, ", step skipped"));
  } else {
    if (p_.cfg.optim.on_nonfinite == NonFinitePolicy::kStop) {
      stop_nonfinite(str("non-finite gradient norm at step ", step),
                     "; stopped before the update, so no parameter or optimizer state was "
                     "changed. Lower optim.lr, enable optim.grad_clip, check the data, or set "
                     "optim.on_nonfinite=skip to skip such steps",
                     r.local_loss);
    }
    const std::string loss_note = std::isfinite(r.local_loss)
                                      ? "the loss on this rank was finite"
                                      : str("the loss on this rank was ", r.local_loss);
    log::rank_warn(str("skipping step ", step, ": non-finite gradient norm (", loss_note, ")"));
  }
  p_.dp.zero_grads();
  r.skipped = true;
  timer_.add(kOptimizer, optimizer_mark, timer_.mark());
  if (!timer_.uses_events()) resolve_phases(phases);
}

StepResult StepRunner::step(std::vector<data::Batch>& micro, std::int64_t step,
                            std::int64_t total_steps, PhaseSeconds& phases) {
  StepResult r;
  const int k_total = static_cast<int>(micro.size());
  const double scale = p_.scaler.scale();
  const bool inject_nan = p_.debug.nan_loss(step);
  p_.model.train();
  namespace trace = runtime::trace;
  model::LossOutput device_sums;  // metric sums the losses left on the device, added there
  double reduce_wait = 0;         // gradient reductions per micro-batch (sharded gradients)
  if (p_.pipeline) {              // the micro-batches through the stages (pipeline_step.hpp)
    p_.pipeline->run(micro, p_.scaler.enabled() ? scale : 0, inject_nan, r, device_sums, phases);
  }
  for (int k = 0; k < (p_.pipeline ? 0 : k_total); ++k) {
    reduce_wait += micro_batch(micro[k], k, k_total, step, scale, inject_nan, r, device_sums);
  }

  // Every reconciliation of gradients after backward (dp buckets, tp-replicated averages).
  {
    trace::Scope traced(0, "gradient sync");  // the communication backward did not hide
    const int before = timer_.mark();
    r.comm_wait = reduce_wait + p_.dp.finish_gradients();
    timer_.add(kCommWait, before, timer_.mark());
  }
  if (!timer_.uses_events()) phases.comm_wait += r.comm_wait;

  // A checkpoint's deferred copy must finish before anything below may change the parameters.
  if (p_.before_update) {
    trace::Scope traced(0, "checkpoint copy wait");
    phases.checkpoint += p_.before_update();
  }
  runtime::position::set_phase(runtime::Phase::kOptimizer);
  trace::Scope optimizer_slice(0, "optimizer");
  const int m2 = timer_.mark();
  if (p_.scaler.enabled()) p_.dp.scale_grads(1.0 / scale);  // exact: a power of two
  if (p_.debug.overflow(step)) {
    p_.dp.scale_grads(std::numeric_limits<double>::infinity());  // tests: this rank only
  }
  r.grad_norm = global_grad_norm();  // the step's one wait for the device (the host decides)
  device_sums.resolve();             // none on CPU unless debug.stage_inputs
  r.loss_sum += device_sums.loss_sum;
  r.correct += static_cast<double>(device_sums.correct);
  if (p_.pipeline) p_.pipeline->share(r);  // the last stage's sums, on every stage
  r.local_loss = r.count > 0 ? r.loss_sum / r.count : 0;
  r.lr = p_.cfg.schedule.lr(p_.cfg.optim.lr, step, total_steps);
  if (nonfinite(r.grad_norm)) {
    skip_nonfinite(r, step, m2, phases);
    return r;
  }
  if (p_.scaler.enabled()) {
    p_.scaler.update(/*nonfinite=*/false);
    r.loss_scale = p_.scaler.scale();
  }
  if (p_.cfg.optim.grad_clip > 0 && r.grad_norm > p_.cfg.optim.grad_clip) {
    p_.dp.scale_grads(p_.cfg.optim.grad_clip / (r.grad_norm + 1e-6));
  }
  update(r.lr);
  p_.dp.zero_grads();
  timer_.add(kOptimizer, m2, timer_.mark());
  if (!timer_.uses_events()) resolve_phases(phases);  // host times: known now
  return r;
}

void IntervalStats::add(const StepResult& r, std::int64_t global_batch, double step_seconds) {
  seconds += step_seconds;
  loss_sum += r.loss_sum;
  correct += r.correct;
  count += r.count;
  samples += static_cast<double>(global_batch);
  steps += 1;
  comm_wait += r.comm_wait;
  grad_norm = r.grad_norm;
  lr = r.lr;
  if (r.skipped) ++skipped;
  loss_scale = r.loss_scale;
}

nlohmann::ordered_json throughput_fields(double samples_per_s, double forward_flops_per_sample,
                                         std::int64_t tokens_per_sample, int world_size,
                                         double peak_flops_per_device) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (tokens_per_sample > 1)
    j["tokens_per_s"] = samples_per_s * static_cast<double>(tokens_per_sample);
  const double flops = 3.0 * forward_flops_per_sample * samples_per_s;
  j["model_flops_per_s"] = flops;
  if (peak_flops_per_device > 0) j["mfu"] = flops / world_size / peak_flops_per_device;
  return j;
}

nlohmann::ordered_json resource_fields(const runtime::ResourceSample& mine,
                                       comm::ControlPlane& world) {
  const std::vector<double> values{mine.cpu_percent, static_cast<double>(mine.rss_bytes),
                                   static_cast<double>(mine.peak_rss_bytes),
                                   mine.device_util_percent,
                                   static_cast<double>(mine.device_memory_bytes)};
  std::vector<double> lo = values, hi = values, sum = values;
  world.reduce(lo, comm::ReduceOp::kMin);
  world.reduce(hi, comm::ReduceOp::kMax);
  world.reduce(sum, comm::ReduceOp::kSum);
  const char* names[] = {"cpu_percent", "rss_bytes", "peak_rss_bytes", "device_util_percent",
                         "device_memory_bytes"};
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i >= 3 && lo[i] < 0) continue;  // a device field some rank could not measure
    j[names[i]] = {{"min", lo[i]}, {"mean", sum[i] / world.size()}, {"max", hi[i]}};
  }
  return j;
}

void log_interval(IntervalStats& in, std::int64_t step, std::int64_t epoch, comm::ControlPlane& dp,
                  RunLog& runlog, const nlohmann::ordered_json& extra) {
  std::vector<double> s{in.loss_sum, in.correct, in.count};
  dp.reduce(s, comm::ReduceOp::kSum);
  const double seconds = in.seconds;
  const double loss = s[2] > 0 ? s[0] / s[2] : 0;
  const double sps = in.samples_per_second();
  nlohmann::ordered_json j{{"type", "train"},
                           {"step", step},
                           {"epoch", epoch},
                           {"loss", loss},
                           {"accuracy", s[2] > 0 ? s[1] / s[2] : 0},
                           {"lr", in.lr},
                           {"grad_norm", in.grad_norm},
                           {"samples_per_s", sps},
                           {"step_time", in.steps > 0 ? seconds / in.steps : 0},
                           {"data_wait", in.steps > 0 ? in.data_wait / in.steps : 0},
                           {"comm_time", in.steps > 0 ? in.comm_wait / in.steps : 0}};
  if (in.loss_scale > 0) {
    j["loss_scale"] = in.loss_scale;
    j["skipped_steps"] = in.skipped;
  }
  for (const auto& [key, value] : extra.items()) j[key] = value;
  runlog.record(j);
  if (!runlog.is_live()) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "step %lld | epoch %lld | loss %.4f | lr %.3g | grad norm %.3g | %.0f samples/s",
                  static_cast<long long>(step), static_cast<long long>(epoch), loss, in.lr,
                  in.grad_norm, sps);
    std::string text = line;
    if (in.loss_scale > 0) {
      text += str(" | loss scale ", in.loss_scale);
      if (in.skipped > 0) text += str(" (", in.skipped, " skipped)");
    }
    runlog.line(text);
  }
}

std::string eval_line(const eval::EvalResult& r, std::int64_t step) {
  // The metrics in the offline evaluation's digits (eval::metrics_text): the same checkpoint
  // evaluated both ways shows the same numbers.
  return str("eval at step ", step, ": ", eval::metrics_text(r), " (", r.samples,
             r.task == Task::kLanguageModel ? " sequences, " : " samples, ",
             format_seconds(r.seconds), ", ", static_cast<std::int64_t>(r.samples_per_second),
             " samples/s)");
}

}  // namespace hpctrain::train
