#include "hpctrain/train/trainer.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>

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
  TrainerState s;
  s.step = j.at("step").get<std::int64_t>();
  s.sampler.epoch = j.at("epoch").get<std::int64_t>();
  s.sampler.offset_in_epoch = j.at("offset_in_epoch").get<std::int64_t>();
  s.sampler.global_step = j.at("global_step").get<std::int64_t>();
  s.sampler.consumed_samples = j.at("consumed_samples").get<std::int64_t>();
  s.skipped_steps = j.value("skipped_steps", std::int64_t{0});
  s.best_metric = j.value("best_metric", 0.0);
  s.best_step = j.value("best_step", std::int64_t{-1});
  s.evals_without_improvement = j.value("evals_without_improvement", std::int64_t{0});
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

  Impl(TrainEnvironment e) : env(std::move(e)) {}
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

  m.config_text = config.dump();
  if (m.is_rank0()) {
    std::filesystem::create_directories(cfg.run.dir);
    std::ofstream out(cfg.run.dir + "/config.yaml");
    out << "# resolved configuration (file, --set overrides and defaults) written by hpctrain\n"
        << m.config_text;
    if (!out) throw Error(str("cannot write ", cfg.run.dir, "/config.yaml: check run.dir"));
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
      StepRunner::Parts{*m.model, *m.flat, *m.sync, *m.optimizer, m.env, cfg, m.device});
  (void)resume;
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

TrainOutcome Trainer::run() {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  auto& world = *m.env.comms.world;
  RunLog runlog(m.is_rank0(), cfg.run.dir, cfg.logging.progress, m.total_steps);
  const int accumulation = cfg.optim.grad_accumulation;

  log::info(str("training ", m.model_name, " (", m.model->logical_parameter_count(),
                " parameters) on ", grid.describe(), ", ", m.global_batch, " samples per step (",
                m.micro_batch, " per rank x ", grid.dp_size(), " dp ranks x ", accumulation,
                " micro-batches), ", m.total_steps, " steps (", m.sampler->steps_per_epoch(),
                " per epoch), run dir ", cfg.run.dir));

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
  IntervalStats interval;
  auto loop_start = Clock::now();
  bool stop = false;
  while (m.state.step < m.total_steps && !stop) {
    const auto step_start = Clock::now();
    const double wait_before = prefetcher.wait_seconds();
    std::vector<data::Batch> micro(accumulation);
    for (int k = 0; k < accumulation; ++k) {
      if (!prefetcher.next(micro[k])) {
        throw Error(str("the data stream ended early at step ", m.state.step, " (internal error)"));
      }
    }
    m.phases.data_wait += prefetcher.wait_seconds() - wait_before;
    const StepResult r = m.steps->step(micro, m.state.step, m.total_steps, m.phases);
    m.sampler->next_global_batch(m.state.sampler);  // advance the main thread's copy
    if (r.skipped) ++m.state.skipped_steps;
    ++m.state.step;
    interval.add(r, m.global_batch);
    m.phases.train_wall += seconds_since(step_start);

    const std::int64_t step = m.state.step;
    runlog.live(step, m.state.sampler.epoch, r.local_loss, r.lr,
                interval.samples / std::max(1e-9, seconds_since(interval.start)));
    if (step % cfg.logging.every_steps == 0 || step == m.total_steps) {
      log_interval(interval, step, m.state.sampler.epoch, *m.env.comms.dp, runlog);
      interval = IntervalStats{};
    }
    const bool eval_now =
        m.val_data && ((cfg.eval.every_steps > 0 && step % cfg.eval.every_steps == 0) ||
                       (cfg.eval.at_end && step == m.total_steps));
    if (eval_now) {
      const auto eval_start = Clock::now();
      eval::EvalOptions options;
      options.batch_size = cfg.eval.batch_size;
      options.bf16 = cfg.run.precision == "bf16";
      options.max_samples = cfg.eval.max_samples;
      auto result = eval::evaluate(*m.model, *m.val_data, *m.env.comms.dp, options);
      m.phases.eval += seconds_since(eval_start);
      m.eval_wall += result.seconds;
      m.samples_evaluated += result.samples;
      nlohmann::ordered_json j{{"type", "eval"},
                               {"step", step},
                               {"epoch", m.state.sampler.epoch},
                               {"split", "val"},
                               {"data", cfg.data.val}};
      nlohmann::json body = result;
      for (auto& [key, value] : body.items()) j[key] = value;
      runlog.record(j);
      runlog.line(eval_line(result, step));
      if (update_early_stopping(m.state, result, m.eval_metric, cfg.eval.patience, step)) {
        outcome.reason =
            str("early stopping: ", m.eval_metric, " did not improve for ", cfg.eval.patience,
                " evaluations (best ", m.state.best_metric, " at step ", m.state.best_step, ")");
        stop = true;
      }
    }
    // Every rank agrees before anyone acts (DESIGN.md invariant 2).
    int local_stop = runtime::stop_signal_received();
    if (cfg.debug.stop_step >= 0 && step == cfg.debug.stop_step) local_stop = SIGUSR1;
    auto flag = torch::tensor({local_stop}, torch::kInt);
    world.all_reduce(flag, comm::ReduceOp::kMax);
    if (flag.item<int>() != 0 && !stop) {
      outcome.reason = runtime::signal_name(flag.item<int>());
      outcome.exit_code = kExitRequeue;
      stop = true;
    }
  }
  m.phases.total_wall = seconds_since(m.started);
  outcome.steps = m.state.step;
  (void)loop_start;

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
    std::ofstream(cfg.run.dir + "/ledger.json") << ledger.dump(2) << "\n";
    runlog.record({{"type", "end"}, {"step", m.state.step}, {"reason", outcome.reason}});
    runlog.line(str("stopped after step ", m.state.step, ": ", outcome.reason));
    runlog.line(ledger_summary(ledger));
  }
  return outcome;
}

}  // namespace hpctrain::train
