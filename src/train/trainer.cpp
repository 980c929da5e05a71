#include "hpctrain/train/trainer.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <time.h>

#include <chrono>
#include <map>
#include <mutex>
#include <optional>

#include "data_state.hpp"
#include "hpctrain/checkpoint/checkpointer.hpp"
#include "hpctrain/comm/device_copy.hpp"
#include "hpctrain/comm/stop_agreement.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/reader_memory.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/model/task_loss.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/clock.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/resource_monitor.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "hpctrain/train/step_clock.hpp"
#include "hpctrain/train/stop_policy.hpp"
#include "hpctrain/train/straggler_detector.hpp"
#include "memory_facts.hpp"
#include "run_report.hpp"
#include "step_log.hpp"
#include "step_observers.hpp"
#include "tensor_memory.hpp"
#include "trainer_builder.hpp"
#include "trainer_checkpoint.hpp"
#include "trainer_parts.hpp"

namespace hpctrain::train {

using Clock = std::chrono::steady_clock;

namespace {

using runtime::seconds_since;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

/// The parts, and what the run accumulates while it trains.
struct Trainer::Impl : TrainerParts {
  explicit Impl(comm::Environment e) : TrainerParts(std::move(e)) {}

  Clock::time_point started = Clock::now();
  PhaseSeconds phases;
  std::int64_t samples_evaluated = 0;
  double eval_wall = 0;
  std::optional<double> metric_at_step;  // eval metric of the current step, if evaluated
  std::int64_t metric_step = -1;
  std::unique_ptr<runtime::ResourceMonitor> monitor;
  std::unique_ptr<StragglerDetector> stragglers;

  /// The run's first lines: model, grid, batch, steps, data and its memory. Local.
  void log_start() const;
  /// A chained or requeued job after the run finished: nothing to train or overwrite, but the
  /// job that saved the final checkpoint may have died before its bookkeeping. Local.
  TrainOutcome already_complete(RunReport& report);
  /// This rank's reader of the steps left. Local.
  std::unique_ptr<data::TrainLoader> make_loader() const;
  /// The micro-batches of the next step into `micro`, its data wait counted. Local.
  void fetch(data::TrainLoader& loader, std::vector<data::Batch>& micro, const StepClock& clock,
             StepLog& steps_log);
  /// One step's forward, backward and update over `micro`; its compute time told to the
  /// straggler detector. Collective.
  StepResult train_step(std::vector<data::Batch>& micro, StepLog& steps_log);
  /// The state after a step's update: the stream position, the step count. Local.
  void advance(const StepResult& r, const data::SamplerState& position, const StepClock& clock);
  /// What this rank brings to the stop agreement after `step`. Local.
  comm::StopRequest stop_request(std::int64_t step, const Deadline& deadline) const;
  /// Evaluates at `step`; early stopping tells `policy`. Collective over the world.
  void run_eval(std::int64_t step, comm::StopAgreement& stop, RunLog& log, StopPolicy& policy);
  /// A resumed run whose last job's stop interrupted the evaluation of this step: evaluates it
  /// first, and saves the step again with its metric so keep-best retention sees it. Collective.
  void run_owed_eval(comm::StopAgreement& stop, RunLog& log, StopPolicy& policy);
  /// The training state at `step` for a checkpoint. Collective over the dp group when sharded.
  checkpoint::SaveContent save_content(std::int64_t step);
  LedgerFacts ledger_facts(std::int64_t steps) const;
};

Trainer::Trainer(Config& config, const std::string& default_run_dir, comm::Environment env,
                 const std::string& resume)
    : impl_(std::make_unique<Impl>(std::move(env))) {
  install_tensor_memory_counter();  // before the model, data and state exist: all are counted
  Impl& m = *impl_;
  TrainerBuilder(config, default_run_dir, resume).build(m, [&m](std::int64_t step) {
    return m.save_content(step);
  });
}

Trainer::~Trainer() = default;

const TrainConfig& Trainer::config() const {
  return impl_->cfg;
}

std::vector<std::pair<std::string, torch::Tensor>> Trainer::local_parameters() const {
  impl_->dp->parameters_ready();
  // Full sharding keeps the float32 masters in owned chunks: gathered, in the model's order.
  const torch::Tensor master = impl_->dp->master_parameters();
  std::map<std::string, torch::Tensor> gathered;
  if (master.defined()) {
    for (const auto& e : impl_->dp->layout()) {
      gathered[e.name] = master.narrow(0, e.offset, e.numel).view(e.param.sizes());
    }
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : impl_->model->named_parameters(true)) {
    out.emplace_back(
        item.key(), master.defined() ? gathered.at(item.key()).cpu() : item.value().detach().cpu());
  }
  return out;
}

TrainOutcome Trainer::run() {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  runtime::set_outcome_step(m.state.step);  // a resumed run that trains no step names its step
  RunReport report(m.is_rank0(), cfg.run.dir, cfg.logging.progress, m.total_steps,
                   /*resume_step=*/m.state.step);
  RunLog& log = report.log();
  m.log_start();
  if (m.state.step >= m.total_steps && m.state.step > 0) return m.already_complete(report);
  report.clear_completion();  // more steps to come
  if (cfg.logging.tensorboard) log.enable_tensorboard(cfg.run.dir + "/tensorboard");
  m.monitor = std::make_unique<runtime::ResourceMonitor>(m.env.device.cuda_index);
  m.debug.hold_memory();
  m.monitor->sample();
  StepObservers observers(cfg, m.dp->trace_slices_per_step(m.cfg.optim.grad_accumulation),
                          m.env.grid.tp_size(), *m.env.control.world, m.env.runtime.world_rank());
  const std::int64_t first_step = m.state.step;
  m.debug.fail_at(0);
  model::defer_metric_reads_on_cpu(m.debug.stage_inputs());
  const std::unique_ptr<data::TrainLoader> loader = m.make_loader();
  Deadline deadline(cfg.run.time_limit_s, cfg.run.time_margin_s, *m.env.control.world);
  comm::StopAgreement agreement(*m.env.control.world);
  StopPolicy policy(deadline.source(), cfg.logging.flight_dump);
  m.checkpoints->set_record([&log](const checkpoint::CommittedSave& s) {
    log.record({{"type", "checkpoint"},
                {"step", s.step},
                {"path", s.path},
                {"bytes", s.bytes},
                {"save_seconds", s.save_seconds},
                {"blocking_seconds", s.blocking_seconds}});
  });
  // From here a stop signal is agreed on and acted on at a step boundary (save, exit 75); before
  // (opening files, resuming) it ended the process at once: there was nothing to save.
  runtime::StopModeScope agree_on_stop(runtime::StopMode::kAgree);
  if (m.evals->owes(m.state.step)) m.run_owed_eval(agreement, log, policy);
  StepClock clock;
  m.stragglers = std::make_unique<StragglerDetector>(
      cfg.logging.straggler_threshold, static_cast<int>(cfg.logging.straggler_intervals));
  StepLog steps_log({log, cfg, m.env, *m.model, *m.sampler, *m.monitor, *m.steps, *m.stragglers,
                     m.tokens_per_sample(), m.global_batch, m.total_steps},
                    m.state.sampler);
  std::vector<data::Batch> micro;
  while (m.state.step < m.total_steps && !policy.stopping()) {
    m.debug.fail_at(m.state.step + 1);
    observers.before_step(m.state.step + 1);
    clock.begin_step();
    m.fetch(*loader, micro, clock, steps_log);
    const StepResult r = m.train_step(micro, steps_log);
    m.advance(r, loader->state(), clock);
    const std::int64_t step = m.state.step;
    steps_log.after_step(step, r, clock.end_step(m.phases), m.state.sampler, m.phases);
    if (m.evals->due(step, m.total_steps)) {
      clock.exclude([&] { m.run_eval(step, agreement, log, policy); });
    }
    // Every rank agrees before anyone acts (docs/ARCHITECTURE.md): one collective per step
    // combines stop signals, the wall-time deadline and the state of the checkpoint saves.
    const comm::StopRequest agreed = agreement.agree(m.stop_request(step, deadline));
    policy.apply(agreed, agreement.signal());
    clock.exclude_seconds(m.checkpoints->after_step(
        step, agreed, policy.last_step(step, m.total_steps), policy.must_save()));
    clock.end_iteration();
    observers.after_step(step, [&m] { m.checkpoints->wait(); });
  }
  runtime::position::set_phase(runtime::Phase::kIdle);
  m.dp->parameters_ready();
  observers.finish();
  m.checkpoints->finish();  // the last save is committed before the job reports its outcome
  m.phases.checkpoint += m.checkpoints->seconds();
  m.steps->resolve_phases(m.phases);
  m.phases.total_wall = seconds_since(m.started);
  TrainOutcome outcome = policy.outcome(m.state.step);
  report.finish(outcome, m.phases, m.ledger_facts(m.state.step - first_step),
                m.checkpoints->last_saved_path(), *m.env.control.world);
  return outcome;
}

void Trainer::Impl::log_start() const {
  const auto& grid = env.grid;
  log::info(str("training ", cfg.model.name, " (", parameters, " parameters) on ", grid.describe(),
                ", ", global_batch, " samples per step (", micro_batch, " per rank x ",
                grid.dp_size(), " dp ranks x ", cfg.optim.grad_accumulation, " micro-batches), ",
                total_steps, " steps (", sampler->steps_per_epoch(), " per epoch), run dir ",
                cfg.run.dir));
  const auto& info = train_data->info();
  log::info(str("data.train: ", info.num_samples, " samples in ", info.files.size(),
                info.files.size() == 1 ? " file" : " files",
                info.sources.empty() ? std::string() : str(", ", info.sources.size(), " sources"),
                "; sample order ", data::sample_order_name(sampler->order()), ", sampler memory ",
                format_bytes(static_cast<double>(sampler->memory_bytes())),
                " per rank; reader memory ",
                format_bytes(data::reader_memory(info, micro_batch, cfg.data.prefetch).total()),
                " per rank"));
}

TrainOutcome Trainer::Impl::already_complete(RunReport& report) {
  log::info(str("run ", cfg.run.dir, " is already complete at step ", state.step));
  LedgerFacts facts = ledger_facts(0);
  facts.steps = state.step;
  facts.samples_trained = state.sampler.consumed_samples;
  report.finish_completed(state.step, facts, resumed_from);
  return TrainOutcome{state.step, "already complete", 0};
}

std::unique_ptr<data::TrainLoader> Trainer::Impl::make_loader() const {
  const auto& grid = env.grid;
  return std::make_unique<data::TrainLoader>(
      *train_data, *sampler, state.sampler, grid.dp_rank(), grid.dp_size(), cfg.data.prefetch,
      state.sampler.global_step + (total_steps - state.step), cfg.optim.grad_accumulation,
      debug.input_staging(device.is_cuda()),
      device.is_cuda() && comm::DeviceCopier::available()
          ? std::make_shared<comm::DeviceCopier>(device)
          : nullptr);
}

void Trainer::Impl::fetch(data::TrainLoader& loader, std::vector<data::Batch>& micro,
                          const StepClock& clock, StepLog& steps_log) {
  runtime::position::set_step(state.step + 1);
  runtime::position::set_phase(runtime::Phase::kDataWait);
  const double wait_before = loader.wait_seconds();
  if (!loader.next_step(micro)) {
    throw Error(str("the data stream ended early at step ", state.step, " (internal error)"));
  }
  if (runtime::trace::on()) {
    runtime::trace::record(0, "data wait", clock.step_start(), Clock::now());
  }
  const double waited = loader.wait_seconds() - wait_before;
  phases.data_wait += waited;
  steps_log.data_wait(waited);
}

StepResult Trainer::Impl::train_step(std::vector<data::Batch>& micro, StepLog& steps_log) {
  const double cpu_before = thread_cpu_seconds();
  StepResult r = steps->step(micro, state.step, total_steps, phases);
  // On the CPU a step's compute is the training thread's CPU time: what the work costs, not how
  // long the operating system let it run (ranks sharing cores would look slow by turns).
  steps_log.compute(thread_cpu_seconds() - cpu_before);
  return r;
}

void Trainer::Impl::advance(const StepResult& r, const data::SamplerState& position,
                            const StepClock& clock) {
  runtime::position::set_phase(runtime::Phase::kStepEnd);
  if (runtime::trace::on()) {
    runtime::trace::record(0, "step", clock.step_start(), Clock::now(), state.step + 1);
  }
  state.sampler = position;
  if (r.skipped) ++state.skipped_steps;
  ++state.step;
}

comm::StopRequest Trainer::Impl::stop_request(std::int64_t step, const Deadline& deadline) const {
  comm::StopRequest local;
  local.signal = debug.stop_signal(step, runtime::stop_signal_received());
  local.deadline = deadline.reached(checkpoints->save_estimate());
  checkpoints->contribute(local);
  runtime::set_outcome_step(step);
  debug.desync(step, *env.control.world);  // tests: a collective the other ranks do not enter
  return local;
}

void Trainer::Impl::run_eval(std::int64_t step, comm::StopAgreement& stop, RunLog& log,
                             StopPolicy& policy) {
  const auto eval_start = Clock::now();
  runtime::PhaseScope phase(runtime::Phase::kEvaluation);
  dp->parameters_ready();
  runtime::trace::Scope traced(0, "eval", step);
  debug.at_evaluation(step);  // tests: as if a signal arrived as this evaluation starts
  eval::EvalOptions options;
  options.batch_size = cfg.eval.batch_size;
  options.precision = cfg.run.precision;
  options.max_samples = cfg.eval.max_samples;
  if (pipeline) {  // each batch through a forward-only schedule over the stages
    const at::ScalarType autocast = autocast_dtype(cfg.run.precision);
    options.forward_loss = [this, autocast](const torch::Tensor& inputs,
                                            const torch::Tensor& targets) {
      return pipeline->evaluate(inputs, targets, autocast);
    };
  }
  // Between evaluation batches too, a stop request is agreed on (and acted on after the step).
  options.stop_check = [&] { return stop.stop_requested(); };
  // Every rank evaluates with dp rank 0's buffers (BatchNorm statistics drift apart per rank,
  // each seeing its own slice), the ones a checkpoint of this step saves and offline eval loads.
  parallel::broadcast_buffers(*model, *env.comms.dp);
  auto result = eval::evaluate(*model, *val_data, *env.control.dp, options);
  phases.eval += seconds_since(eval_start);
  eval_wall += result.seconds;
  samples_evaluated += result.samples;
  if (result.interrupted) {
    // The stop checkpoint remembers it; the resumed run evaluates this step first.
    evals->interrupted(step);
    log.line(str("evaluation at step ", step, " interrupted by ",
                 runtime::signal_name(stop.signal()), ": the resumed run evaluates it first"));
    return;
  }
  nlohmann::ordered_json record{{"type", "eval"},
                                {"step", step},
                                {"epoch", state.sampler.epoch},
                                {"split", "val"},
                                {"data", cfg.data.val}};
  eval::add_result_fields(record, result);
  log.record(record);
  log.line(eval_line(result, step));
  metric_at_step = result.metric(eval::metric_name(evals->metric()));
  metric_step = step;
  if (evals->record(result, step)) policy.early_stop(evals->early_stop_reason());
}

void Trainer::Impl::run_owed_eval(comm::StopAgreement& stop, RunLog& log, StopPolicy& policy) {
  log.line(str("evaluating step ", state.step, ", whose evaluation a stop interrupted"));
  run_eval(state.step, stop, log, policy);
  if (metric_step == state.step) checkpoints->save(state.step, checkpoint::SaveReason::kStop);
  // Interrupted again: the checkpoint of this step still owes the evaluation.
  policy.apply(comm::StopRequest{}, stop.signal());
}

checkpoint::SaveContent Trainer::Impl::save_content(std::int64_t step) {
  dp->parameters_ready();
  checkpoint::SaveContent content;
  content.step = step;
  content.epoch = state.sampler.epoch;
  content.consumed_samples = state.sampler.consumed_samples;
  state.eval = evals->progress();
  content.trainer_state = state.to_json();
  content.trainer_state["optimizer_steps"] = optimizer->steps();
  content.trainer_state["global_batch"] = global_batch;
  content.trainer_state["total_steps"] = total_steps;
  content.trainer_state["lr"] = cfg.schedule.lr(cfg.optim.lr, step, total_steps);
  if (scaler->enabled()) content.trainer_state["loss_scaler"] = scaler->to_json();
  record_data_state(content.trainer_state, *sampler, state.sampler, train_data->info());
  content.tensors = state_records(*model, *dp, *optimizer, /*with_optimizer=*/true,
                                  /*snapshot_buffers=*/true);
  drop_stage_copies(content.tensors, *model);  // saved by the stage holding the primary copy
  // The manager copies into reused CPU buffers on its background thread while the next step's
  // forward and backward run; the step waits for that copy before its optimizer update.
  content.copy = true;
  content.defer_copy = true;
  {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    content.rng_state = generator.get_state();
  }
  content.config_text = config_text;
  if (metric_step == step) content.metric = metric_at_step;
  return content;
}

LedgerFacts Trainer::Impl::ledger_facts(std::int64_t steps) const {
  const auto& grid = env.grid;
  LedgerFacts facts;
  facts.model_name = cfg.model.name;
  facts.task = model->task();
  facts.parameters = parameters;
  facts.forward_flops_per_sample = model->forward_flops_per_sample();
  facts.flops_source = model->flops_source();
  facts.tokens_per_sample = tokens_per_sample();
  facts.steps = steps;
  facts.samples_trained = steps * global_batch;
  facts.samples_evaluated = samples_evaluated;
  facts.eval_seconds_total = eval_wall;
  facts.world_size = grid.world_size();
  facts.dp = grid.dp_size();
  facts.tp = grid.tp_size();
  facts.pp = grid.pp_size();
  if (pipeline) {
    facts.pp_schedule = plan::pipeline_schedule_name(cfg.parallel.pp_schedule);
    facts.pp_virtual = cfg.parallel.pp_virtual;
    facts.micro_batches = static_cast<int>(cfg.optim.grad_accumulation);
    facts.predicted_bubble_fraction = plan::predicted_bubble_fraction(pipeline_shape(cfg));
  }
  facts.threads_per_rank = env.device.threads;
  facts.device = env.device.device;
  facts.precision = cfg.run.precision;
  facts.tf32_matmul = compat::tf32().matmul;
  facts.tf32_cudnn = compat::tf32().cudnn;
  facts.tf32_source = cfg.run.tf32 ? "run.tf32" : "LibTorch default";
  facts.skipped_steps = state.skipped_steps;
  facts.loss_scale = scaler->enabled() ? scaler->scale() : 0;
  facts.peak_device_memory_bytes = monitor ? monitor->peak_device_memory_bytes() : -1;
  facts.peak_tensor_bytes = peak_tensor_bytes();
  if (stragglers) facts.stragglers = stragglers->summary();
  add_memory_facts(facts, *model, *dp, *optimizer, cfg);
  return facts;
}

}  // namespace hpctrain::train
