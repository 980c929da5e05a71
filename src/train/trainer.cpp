#include "hpctrain/train/trainer.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/prefetcher.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/optimizer.hpp"
#include "hpctrain/train/progress.hpp"
#include "input_checks.hpp"
#include "run_files.hpp"
#include "trainer_checkpoint.hpp"
#include "trainer_steps.hpp"

namespace hpctrain::train {

using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

nlohmann::json TrainerState::to_json() const {
  return {{"step", step},
          {"epoch", sampler.epoch},
          {"offset_in_epoch", sampler.offset_in_epoch},
          {"global_step", sampler.global_step},
          {"consumed_samples", sampler.consumed_samples},
          {"skipped_steps", skipped_steps},
          {"best_metric", best_metric},
          {"best_step", best_step},
          {"evals_without_improvement", evals_without_improvement}};
}

TrainerState TrainerState::from_json(const nlohmann::json& j) {
  // A manifest whose checksum was recomputed after an edit passes verification: every field is
  // checked here, and a bad one named (exit 4), instead of a JSON library message.
  auto field = [&j](const char* key, std::optional<std::int64_t> fallback) -> std::int64_t {
    if (!j.is_object()) {
      throw CheckpointError(
          "manifest.json: \"trainer_state\" should be an object: the "
          "checkpoint was not written by hpctrain train; resume from another");
    }
    if (!j.contains(key) && fallback) return *fallback;
    if (!j.contains(key) || !j.at(key).is_number_integer() || j.at(key).get<std::int64_t>() < 0) {
      throw CheckpointError(
          str("manifest.json: trainer_state.", key,
              " should be a non-negative integer: the manifest was edited or "
              "was not written by hpctrain train; resume from another checkpoint"));
    }
    return j.at(key).get<std::int64_t>();
  };
  TrainerState s;
  s.step = field("step", std::nullopt);
  s.sampler.epoch = field("epoch", std::nullopt);
  s.sampler.offset_in_epoch = field("offset_in_epoch", std::nullopt);
  s.sampler.global_step = field("global_step", std::nullopt);
  s.sampler.consumed_samples = field("consumed_samples", std::nullopt);
  s.skipped_steps = field("skipped_steps", 0);
  if (j.contains("best_metric") && !j.at("best_metric").is_number()) {
    throw CheckpointError("manifest.json: trainer_state.best_metric should be a number");
  }
  s.best_metric = j.value("best_metric", 0.0);
  s.best_step = j.contains("best_step") && j.at("best_step").is_number_integer()
                    ? j.at("best_step").get<std::int64_t>()
                    : std::int64_t{-1};
  s.evals_without_improvement = field("evals_without_improvement", 0);
  if (j.contains("optimizer_steps")) field("optimizer_steps", 0);
  return s;
}

struct Trainer::Impl {
  TrainConfig cfg;
  TrainEnvironment env;
  std::string config_text;
  std::string model_name;
  std::unique_ptr<data::Dataset> train_data;
  std::unique_ptr<data::Dataset> val_data;
  std::shared_ptr<model::Model> model;
  std::unique_ptr<parallel::FlatParameters> flat;
  std::unique_ptr<parallel::GradientSynchronizer> sync;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<data::TrainSampler> sampler;
  std::unique_ptr<StepRunner> steps;
  TrainerState state;
  std::int64_t total_steps = 0;
  std::int64_t micro_batch = 0;  // per rank
  std::int64_t global_batch = 0;
  torch::Device device{torch::kCPU};
  Clock::time_point started = Clock::now();
  PhaseSeconds phases;
  std::int64_t samples_evaluated = 0;
  double eval_wall = 0;
  std::string eval_metric;
  std::unique_ptr<checkpoint::CheckpointManager> ckpt;
  std::int64_t last_saved_step = -1;
  Clock::time_point last_save_time = Clock::now();
  std::optional<double> metric_at_step;  // eval metric of the current step, if evaluated
  std::int64_t metric_step = -1;

  Impl(TrainEnvironment e) : env(std::move(e)) {}
  void resume(const std::string& resume);
  template <typename Agree>
  bool run_eval(std::int64_t step, int& stop_signal, Agree& agree, RunLog& runlog,
                TrainOutcome& outcome);
  void save(std::int64_t step, const char* why);
  bool is_rank0() const { return env.runtime.world_rank() == 0; }
};

Trainer::Trainer(Config& config, const std::string& default_run_dir, TrainEnvironment env,
                 const std::string& resume)
    : impl_(std::make_unique<Impl>(std::move(env))) {
  Impl& m = *impl_;
  m.cfg = TrainConfig::from(config, default_run_dir);
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  if (cfg.parallel.tp != grid.tp_size()) {
    throw ConfigError(str("parallel.tp = ", cfg.parallel.tp, " but the process grid has tp = ",
                          grid.tp_size(), ": build the grid from the same config"));
  }
  if (cfg.data.train.empty()) {
    throw ConfigError(
        "missing required key 'data.train': the HDF5 file to train on (hpctrain "
        "prepare writes one); set it in the config or with --set data.train=PATH");
  }
  // Every check on files and sizes happens here, on every rank, before any collective.
  auto model_section = config.section("model");
  const std::int64_t seq_len = model_section.get<std::int64_t>("seq_len", 0);
  m.micro_batch = cfg.data.batch_size;
  m.global_batch = cfg.data.batch_size * grid.dp_size() * cfg.optim.grad_accumulation;
  data::DatasetExpectation expect;
  expect.seq_len = seq_len;
  expect.min_samples = m.global_batch;
  expect.config_key = "data.train";
  m.train_data = data::Dataset::open(cfg.data.train, expect, cfg.data.read_options());
  if (!cfg.data.val.empty()) {
    data::DatasetExpectation val_expect;
    val_expect.seq_len = seq_len;
    val_expect.config_key = "data.val";
    m.val_data = data::Dataset::open(cfg.data.val, val_expect, cfg.data.read_options());
  }

  check_model_input_fits_data(model_section, m.train_data->info(), "data.train");
  if (m.val_data) check_model_input_fits_data(model_section, m.val_data->info(), "data.val");
  torch::manual_seed(cfg.run.seed);
  model::ModelContext ctx{m.env.comms.tp, grid.tp_rank(), grid.tp_size(), cfg.run.seed};
  m.model = model::build_model(model_section, ctx);
  m.model_name = model_section.get<std::string>("name", "mlp");
  config.check_unknown_keys();
  check_data_fits_model(*m.model, *m.train_data, "data.train");
  if (m.val_data) check_data_fits_model(*m.model, *m.val_data, "data.val");
  if (m.model->task() == "language_model") {
    const auto vocab = model_section.get<std::int64_t>("vocab_size", 0);
    for (auto* d : {m.train_data.get(), m.val_data.get()}) {
      if (d && d->info().vocab_size > vocab) {
        throw DataError(str(d->info().path, " has a vocabulary of ", d->info().vocab_size,
                            " tokens but model.vocab_size = ", vocab,
                            ": set model.vocab_size >= ", d->info().vocab_size));
      }
    }
  }
  m.eval_metric = cfg.eval.metric.empty()
                      ? (m.model->task() == "classification" ? "accuracy" : "loss")
                      : cfg.eval.metric;

  m.sampler = std::make_unique<data::TrainSampler>(m.train_data->info().num_samples, m.global_batch,
                                                   cfg.run.seed, cfg.data.shuffle);
  const std::int64_t epoch_steps = m.sampler->steps_per_epoch();
  m.total_steps = epoch_steps * cfg.run.epochs;
  if (cfg.run.max_steps > 0) m.total_steps = std::min(m.total_steps, cfg.run.max_steps);

  if (resume == "none" && !checkpoint::list_checkpoints(cfg.run.dir).empty()) {
    throw ConfigError(str("run.dir = ", cfg.run.dir,
                          " already holds checkpoints; --resume none "
                          "would start a new run over them. Resume it (--resume auto), or choose "
                          "another run.dir"));
  }
  m.config_text = config.dump();
  if (m.is_rank0()) {
    create_run_dir(cfg.run.dir);
    const std::string error = write_run_file(
        cfg.run.dir + "/config.yaml",
        "# resolved configuration (file, --set overrides and defaults) written by hpctrain\n" +
            m.config_text);
    if (!error.empty()) throw ConfigError(str("run.dir = ", cfg.run.dir, ": ", error));
  }

  // Collectives from here on.
  if (m.env.device.cuda_index >= 0) m.device = torch::Device(torch::kCUDA, m.env.device.cuda_index);
  m.model->to(m.device);
  m.flat = std::make_unique<parallel::FlatParameters>(*m.model);
  parallel::broadcast_parameters(*m.flat, *m.env.comms.dp);
  const auto bucket_bytes = static_cast<std::int64_t>(cfg.parallel.bucket_mb * 1024 * 1024);
  m.sync = std::make_unique<parallel::GradientSynchronizer>(*m.flat, m.env.comms.dp, bucket_bytes,
                                                            cfg.parallel.overlap);
  m.optimizer = std::make_unique<Optimizer>(*m.flat, cfg.optim);
  m.steps = std::make_unique<StepRunner>(
      StepRunner::Parts{*m.model, *m.flat, *m.sync, *m.optimizer, m.env, cfg, m.device,
                        [&m]() { return m.ckpt ? m.ckpt->wait_for_copy() : 0.0; }});
  checkpoint::ManagerOptions options;
  options.keep = cfg.checkpoint.keep;
  options.keep_best = cfg.checkpoint.keep_best;
  options.higher_is_better = eval::EvalResult::higher_is_better(m.eval_metric);
  options.background = cfg.checkpoint.background;
  options.metric_name = m.eval_metric;
  m.ckpt = std::make_unique<checkpoint::CheckpointManager>(cfg.run.dir, grid, m.env.comms, options);
  m.resume(resume);
}

void Trainer::Impl::resume(const std::string& resume) {
  auto path = ckpt->resolve(resume);
  if (!path) {
    if (resume == "auto") log::debug("no checkpoint to resume from: starting at step 0");
    return;
  }
  auto records = state_records(*model, *flat, *optimizer, /*with_optimizer=*/true);
  checkpoint::Loaded loaded = ckpt->load(*path, records);
  const auto& ts = loaded.trainer_state;
  state = TrainerState::from_json(ts);
  optimizer->set_steps(ts.value("optimizer_steps", state.step - state.skipped_steps));
  last_saved_step = state.step;
  const auto& grid = env.grid;
  if (loaded.same_world && loaded.rng_state.defined()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(loaded.rng_state);
  } else {
    // Dropout draws differ from an uninterrupted run; the sample stream does not (it depends on
    // the seed and the position only).
    torch::manual_seed(cfg.run.seed + 1000003ULL * static_cast<std::uint64_t>(state.step) +
                       static_cast<std::uint64_t>(env.runtime.world_rank()));
  }
  log::info(str("resumed from ", loaded.path, " at step ", state.step, " (epoch ",
                state.sampler.epoch, ", ", state.sampler.consumed_samples, " samples consumed)"));
  const auto saved_grid = loaded.manifest.value("grid", nlohmann::json::object());
  if (!loaded.same_grid) {
    log::info(str("note: the checkpoint was written on a dp=", saved_grid.value("dp", 0),
                  " x tp=", saved_grid.value("tp", 0), " grid, this run is ", grid.describe(),
                  ": tensors were resharded, the sample stream continues at sample ",
                  state.sampler.consumed_samples, " with ", global_batch,
                  " samples per step, and dropout randomness is reseeded"));
  }
  if (state.step >= total_steps) {
    log::info(str("the checkpoint is at step ", state.step, ", which is not before the last step (",
                  total_steps, "): nothing left to train"));
  }
}

void Trainer::Impl::save(std::int64_t step, const char* why) {
  const auto start = Clock::now();
  checkpoint::SaveContent content;
  content.step = step;
  content.epoch = state.sampler.epoch;
  content.consumed_samples = state.sampler.consumed_samples;
  content.trainer_state = state.to_json();
  content.trainer_state["optimizer_steps"] = optimizer->steps();
  content.trainer_state["global_batch"] = global_batch;
  content.trainer_state["total_steps"] = total_steps;
  content.trainer_state["lr"] = cfg.schedule.lr(cfg.optim.lr, step, total_steps);
  content.tensors = state_records(*model, *flat, *optimizer, /*with_optimizer=*/true);
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
  ckpt->save(std::move(content));
  last_saved_step = step;
  last_save_time = Clock::now();
  phases.checkpoint += seconds_since(start);
  log::debug(str("checkpoint of step ", step, " (", why, ") handed over in ",
                 format_seconds(ckpt->last_blocking_seconds())));
}

Trainer::~Trainer() = default;

const TrainConfig& Trainer::config() const {
  return impl_->cfg;
}

std::vector<std::pair<std::string, torch::Tensor>> Trainer::local_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : impl_->model->named_parameters(true)) {
    out.emplace_back(item.key(), item.value().detach().cpu());
  }
  return out;
}

// Evaluates at `step`, records the result, and returns true when early stopping ends the run.
template <typename Agree>
bool Trainer::Impl::run_eval(std::int64_t step, int& stop_signal, Agree& agree, RunLog& runlog,
                             TrainOutcome& outcome) {
  const auto eval_start = Clock::now();
  eval::EvalOptions options;
  options.batch_size = cfg.eval.batch_size;
  options.bf16 = cfg.run.precision == "bf16";
  options.max_samples = cfg.eval.max_samples;
  // Between evaluation batches too, a stop request is agreed on (and acted on after the step).
  options.stop_check = [&] {
    auto flags = agree(runtime::stop_signal_received(), false, false);
    if (flags[0] != 0) stop_signal = flags[0];
    return flags[0] != 0;
  };
  auto result = eval::evaluate(*model, *val_data, *env.comms.dp, options);
  phases.eval += seconds_since(eval_start);
  eval_wall += result.seconds;
  samples_evaluated += result.samples;
  if (result.interrupted) {
    runlog.line(
        str("evaluation at step ", step, " interrupted by ", runtime::signal_name(stop_signal)));
    return false;
  }
  nlohmann::ordered_json j{{"type", "eval"},
                           {"step", step},
                           {"epoch", state.sampler.epoch},
                           {"split", "val"},
                           {"data", cfg.data.val}};
  nlohmann::json body = result;
  for (auto& [key, value] : body.items()) j[key] = value;
  runlog.record(j);
  runlog.line(eval_line(result, step));
  metric_at_step = result.metric(eval_metric);
  metric_step = step;
  if (update_early_stopping(state, result, eval_metric, cfg.eval.patience, step)) {
    outcome.reason =
        str("early stopping: ", eval_metric, " did not improve for ", cfg.eval.patience,
            " evaluations (best ", state.best_metric, " at step ", state.best_step, ")");
    return true;
  }
  return false;
}

TrainOutcome Trainer::run() {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  auto& world = *m.env.comms.world;
  RunLog runlog(m.is_rank0(), cfg.run.dir, cfg.logging.progress, m.total_steps,
                /*resume_step=*/m.state.step);
  const int accumulation = cfg.optim.grad_accumulation;

  log::info(str("training ", m.model_name, " (", m.model->logical_parameter_count(),
                " parameters) on ", grid.describe(), ", ", m.global_batch, " samples per step (",
                m.micro_batch, " per rank x ", grid.dp_size(), " dp ranks x ", accumulation,
                " micro-batches), ", m.total_steps, " steps (", m.sampler->steps_per_epoch(),
                " per epoch), run dir ", cfg.run.dir));

  const std::string complete_marker = cfg.run.dir + "/training_complete.json";
  if (m.state.step >= m.total_steps && m.state.step > 0) {
    // A chained or requeued job after the run finished: nothing to do, and nothing to overwrite.
    log::info(str("run ", cfg.run.dir, " is already complete at step ", m.state.step));
    return TrainOutcome{m.state.step, "already complete", 0};
  }
  if (m.is_rank0()) std::filesystem::remove(complete_marker);  // more steps to come

  // The prefetch thread walks its own copy of the sampler state; the main thread advances the
  // same state at each step, so both agree on the stream without sharing anything.
  data::SamplerState feed_state = m.state.sampler;
  std::vector<std::int64_t> slice;
  const std::int64_t first_step = m.state.step;
  auto produce = [&, feed_state](std::int64_t i, data::Batch& out) mutable {
    const std::int64_t step = first_step + i / accumulation;
    const int k = static_cast<int>(i % accumulation);
    if (step >= m.total_steps) return false;
    if (k == 0) {
      auto global = m.sampler->next_global_batch(feed_state);
      slice = data::TrainSampler::rank_slice(global, grid.dp_rank(), grid.dp_size());
    }
    std::vector<std::int64_t> micro(slice.begin() + k * m.micro_batch,
                                    slice.begin() + (k + 1) * m.micro_batch);
    out = m.train_data->read(micro);
    return true;
  };
  data::Prefetcher prefetcher(produce, cfg.data.prefetch);

  TrainOutcome outcome;
  outcome.reason = "completed";
  Deadline deadline(cfg.run.time_limit_s, cfg.run.time_margin_s, world);
  // Before the first save has been timed, assume 100 MB/s for the parameters and optimizer state.
  const double guessed_save_s = static_cast<double>(m.flat->numel()) * 12 / 100e6;
  int stop_signal = 0;
  // All ranks combine their stop flag (a signal, or the time limit) in one collective.
  auto agree = [&](int local_signal, bool local_deadline, bool local_save_due) {
    auto flags =
        torch::tensor({local_signal, local_deadline ? 1 : 0, local_save_due ? 1 : 0}, torch::kInt);
    world.all_reduce(flags, comm::ReduceOp::kMax);
    return std::array<int, 3>{flags[0].item<int>(), flags[1].item<int>(), flags[2].item<int>()};
  };
  // From here a stop signal is agreed on and acted on at a step boundary (save, exit 75); before
  // (opening files, resuming) it ended the process at once: there was nothing to save.
  runtime::StopModeScope agree_on_stop(runtime::StopMode::kAgree);
  IntervalStats interval;
  bool stop = false;
  // The loop's time after a step (logging, the stop agreement) outside evaluations and saves,
  // counted with the next step: training time is the loop's time less evaluations and saves.
  double carried = 0;
  while (m.state.step < m.total_steps && !stop) {
    const auto step_start = Clock::now();
    const double wait_before = prefetcher.wait_seconds();
    std::vector<data::Batch> micro(accumulation);
    for (int k = 0; k < accumulation; ++k) {
      if (!prefetcher.next(micro[k])) {
        throw Error(str("the data stream ended early at step ", m.state.step, " (internal error)"));
      }
    }
    const double waited = prefetcher.wait_seconds() - wait_before;
    m.phases.data_wait += waited;
    interval.data_wait += waited;
    const StepResult r = m.steps->step(micro, m.state.step, m.total_steps, m.phases);
    m.sampler->next_global_batch(m.state.sampler);  // advance the main thread's copy
    if (r.skipped) ++m.state.skipped_steps;
    ++m.state.step;
    const double step_seconds = seconds_since(step_start) + carried;
    interval.add(r, m.global_batch, step_seconds);
    m.phases.train_wall += step_seconds;
    const auto after_step = Clock::now();
    double excluded = 0;  // evaluation and checkpoint saves of this iteration

    const std::int64_t step = m.state.step;
    runlog.live(step, m.state.sampler.epoch, r.local_loss, r.lr, interval.samples_per_second());
    if (step % cfg.logging.every_steps == 0 || step == m.total_steps) {
      log_interval(interval, step, m.state.sampler.epoch, *m.env.comms.dp, runlog);
      interval = IntervalStats{};
    }
    const bool eval_now =
        m.val_data && ((cfg.eval.every_steps > 0 && step % cfg.eval.every_steps == 0) ||
                       (cfg.eval.at_end && step == m.total_steps));
    if (eval_now) {
      const auto eval_start = Clock::now();
      if (m.run_eval(step, stop_signal, agree, runlog, outcome)) stop = true;
      excluded += seconds_since(eval_start);
    }

    // Every rank agrees before anyone acts (DESIGN.md invariant 2): one collective per step
    // combines stop signals, the wall-time deadline and the time-based checkpoint interval.
    int local_signal = runtime::stop_signal_received();
    if (cfg.debug.stop_step >= 0 && step == cfg.debug.stop_step) local_signal = SIGUSR1;
    const double save_estimate =
        m.ckpt->last_save_seconds() > 0 ? m.ckpt->last_save_seconds() : guessed_save_s;
    const bool by_time = cfg.checkpoint.every_minutes > 0 &&
                         seconds_since(m.last_save_time) >= cfg.checkpoint.every_minutes * 60;
    auto flags = agree(local_signal, deadline.reached(save_estimate), by_time);
    if (stop_signal == 0) stop_signal = flags[0];
    bool requeue = false;
    if (stop_signal != 0) {
      outcome.reason =
          str(runtime::signal_name(stop_signal), " received: saved, requeue to resume");
      requeue = true;
    } else if (flags[1] != 0) {
      outcome.reason = str("time limit (", deadline.source(), "): saved, requeue to resume");
      requeue = true;
    }
    if (requeue) {
      outcome.exit_code = kExitRequeue;
      stop = true;
    }
    const bool last = stop || step == m.total_steps;
    const bool save_now =
        requeue || flags[2] != 0 ||
        (cfg.checkpoint.every_steps > 0 && step % cfg.checkpoint.every_steps == 0) ||
        (last && cfg.checkpoint.at_end);
    if (save_now && m.last_saved_step != step) {
      const auto save_start = Clock::now();
      m.save(step, requeue ? "stop request" : last ? "end of run" : "interval");
      excluded += seconds_since(save_start);
    }
    carried = std::max(0.0, seconds_since(after_step) - excluded);
  }
  if (m.state.step >= m.total_steps && m.last_saved_step != m.state.step && cfg.checkpoint.at_end &&
      m.state.step > first_step) {
    m.save(m.state.step, "end of run");
  }
  {
    const auto start = Clock::now();
    m.ckpt->wait();  // the last save is committed before the job reports its outcome
    m.phases.checkpoint += seconds_since(start);
    if (!m.ckpt->last_saved_path().empty()) {
      runlog.record({{"type", "checkpoint"},
                     {"step", m.last_saved_step},
                     {"path", m.ckpt->last_saved_path()},
                     {"bytes", m.ckpt->last_save_bytes()},
                     {"save_seconds", m.ckpt->last_save_seconds()},
                     {"blocking_seconds", m.ckpt->last_blocking_seconds()}});
    }
  }
  m.phases.total_wall = seconds_since(m.started);
  outcome.steps = m.state.step;

  LedgerFacts facts;
  facts.model_name = m.model_name;
  facts.task = m.model->task();
  facts.parameters = m.model->logical_parameter_count();
  facts.forward_flops_per_sample = m.model->forward_flops_per_sample();
  facts.tokens_per_sample = m.model->task() == "language_model" ? m.train_data->info().seq_len : 1;
  facts.steps = m.state.step - first_step;
  facts.samples_trained = facts.steps * m.global_batch;
  facts.samples_evaluated = m.samples_evaluated;
  facts.eval_seconds_total = m.eval_wall;
  facts.world_size = grid.world_size();
  facts.dp = grid.dp_size();
  facts.tp = grid.tp_size();
  facts.threads_per_rank = m.env.device.threads;
  facts.device = m.env.device.device;
  auto ledger = build_ledger(m.phases, facts, world);
  if (m.is_rank0()) {
    const std::string ledger_error =
        write_run_file(cfg.run.dir + "/ledger.json", ledger.dump(2) + "\n");
    if (!ledger_error.empty()) {
      // The run trained and saved, but its account is missing: say so, and do not end with 0.
      log::warn(str("the compute ledger was not written: ", ledger_error));
      outcome.reason += str("; ledger.json not written (", ledger_error, ")");
    }
    runlog.record({{"type", "end"}, {"step", m.state.step}, {"reason", outcome.reason}});
    runlog.line(str("stopped after step ", m.state.step, ": ", outcome.reason));
    runlog.line(ledger_summary(ledger));
    if (outcome.exit_code == 0) {
      // The marker offline evaluation (--watch) waits for: no more checkpoints will come.
      std::ofstream(complete_marker)
          << nlohmann::json{{"step", m.state.step},
                            {"reason", outcome.reason},
                            {"last_checkpoint", m.ckpt->last_saved_path()}}
                 .dump()
          << "\n";
    }
    // Training is complete (the marker says so), but the run's outputs are not: exit 1.
    if (!ledger_error.empty() && outcome.exit_code == kExitOk) outcome.exit_code = kExitError;
  }
  return outcome;
}

}  // namespace hpctrain::train
