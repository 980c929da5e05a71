#include "hpctrain/train/trainer.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>

#include "data_state.hpp"
#include "hpctrain/checkpoint/checkpoint_schedule.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/comm/device_copy.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/comm/stop_agreement.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/reader_memory.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/task_loss.hpp"
#include "hpctrain/parallel/data_parallel_shards.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"
#include "hpctrain/parallel/gradient_finalizer.hpp"
#include "hpctrain/parallel/gradient_synchronizer.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/resource_monitor.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "hpctrain/train/ledger.hpp"
#include "hpctrain/train/loss_scaler.hpp"
#include "hpctrain/train/optimizer.hpp"
#include "hpctrain/train/progress.hpp"
#include "hpctrain/train/resume_checks.hpp"
#include "input_checks.hpp"
#include "memory_facts.hpp"
#include "pipeline_step.hpp"
#include "profile_session.hpp"
#include "run_files.hpp"
#include "run_report.hpp"
#include "tensor_memory.hpp"
#include "trace_session.hpp"
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
  nlohmann::json j{{"step", step},
                   {"epoch", sampler.epoch},
                   {"offset_in_epoch", sampler.offset_in_epoch},
                   {"global_step", sampler.global_step},
                   {"consumed_samples", sampler.consumed_samples},
                   {"skipped_steps", skipped_steps}};
  eval.to_json(j);
  return j;
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
  field("evals_without_improvement", 0);
  if (j.contains("best_step") && !j.at("best_step").is_number_integer()) {
    throw CheckpointError("manifest.json: trainer_state.best_step should be an integer");
  }
  if (j.contains("interrupted_eval_step") && !j.at("interrupted_eval_step").is_number_integer()) {
    throw CheckpointError(
        "manifest.json: trainer_state.interrupted_eval_step should be an integer");
  }
  if (j.contains("optimizer_steps")) field("optimizer_steps", 0);
  s.eval = eval::EvalProgress::from_json(j);
  return s;
}

struct Trainer::Impl {
  TrainConfig cfg;
  comm::Environment env;
  std::string config_text;
  std::string model_name;
  std::unique_ptr<data::Dataset> train_data;
  std::unique_ptr<data::Dataset> val_data;
  std::shared_ptr<model::Model> model;
  std::unique_ptr<parallel::FlatParameters> flat;
  std::unique_ptr<parallel::GradientSynchronizer> sync;
  std::unique_ptr<parallel::DataParallelShards> shards;  // parallel.shard_optimizer only
  std::unique_ptr<parallel::GradientFinalizer> finalizer;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;
  std::unique_ptr<data::TrainSampler> sampler;
  std::unique_ptr<PipelineStep> pipeline;  // parallel.pp > 1 only
  std::int64_t parameters = 0;             // of the logical model (all stages)
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
  std::unique_ptr<checkpoint::CheckpointManager> ckpt;
  std::unique_ptr<checkpoint::CheckpointSchedule> saves;
  std::unique_ptr<eval::EvalSchedule> evals;
  std::string resumed_from;              // checkpoint directory, if the run resumed
  std::optional<double> metric_at_step;  // eval metric of the current step, if evaluated
  std::int64_t metric_step = -1;
  std::unique_ptr<runtime::ResourceMonitor> monitor;
  std::vector<char> debug_memory;  // debug.extra_memory_mb, held while training

  Impl(comm::Environment e) : env(std::move(e)) {}
  ~Impl() {
    if (model) model->set_parameter_wait(nullptr);  // it points at shards, destroyed first
  }
  /// Completes a parameter gather still running into the next forward (sharded optimizer):
  /// before anything but the training forward reads the parameters. Local.
  void parameters_ready() {
    if (shards) shards->wait_parameters();
  }
  /// Every check on files and sizes, on every rank, before any collective but the startup
  /// agreements (StartupAgreement). Local but for those.
  void validate(Config& config, const std::string& default_run_dir, const std::string& resume,
                comm::StartupAgreement& startup);
  /// The parts that communicate: parameters broadcast, synchronizers, optimizer, checkpoints,
  /// the resume. Collective over the world.
  void build(const std::string& resume);
  void resume(const std::string& resume);
  /// Evaluates at `step`; true when early stopping ends the run. Collective over the world.
  bool run_eval(std::int64_t step, comm::StopAgreement& stop, RunLog& log, TrainOutcome& outcome);
  void save(std::int64_t step, checkpoint::SaveReason why);
  LedgerFacts ledger_facts(std::int64_t steps) const;
  bool is_rank0() const { return env.runtime.world_rank() == 0; }
};

Trainer::Trainer(Config& config, const std::string& default_run_dir, comm::Environment env,
                 const std::string& resume)
    : impl_(std::make_unique<Impl>(std::move(env))) {
  Impl& m = *impl_;
  install_tensor_memory_counter();  // before the model, data and state exist: all are counted
  // One error, one message (comm/startup_agreement.hpp).
  comm::StartupAgreement startup(*m.env.control.world);
  startup.run([&] { m.validate(config, default_run_dir, resume, startup); });
  m.build(resume);
}

void Trainer::Impl::validate(Config& config, const std::string& default_run_dir,
                             const std::string& resume, comm::StartupAgreement& startup) {
  Impl& m = *this;
  m.cfg = TrainConfig::from(config, default_run_dir);
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  if (cfg.parallel.tp != grid.tp_size()) {
    throw ConfigError(str("parallel.tp = ", cfg.parallel.tp, " but the process grid has tp = ",
                          grid.tp_size(), ": build the grid from the same config"));
  }
  if (cfg.parallel.pp != grid.pp_size()) {
    throw ConfigError(str("parallel.pp = ", cfg.parallel.pp, " but the process grid has pp = ",
                          grid.pp_size(), ": build the grid from the same config"));
  }
  // The schedule's shape (interleaved needs a multiple of pp micro-batches), before any
  // collective; the model checks its cut (at least one block per stage) when it is built.
  if (grid.pp_size() > 1) plan::validate_pipeline_shape(pipeline_shape(cfg));
  if (cfg.run.precision == Precision::kFp16 && m.env.device.cuda_index < 0) {
    throw ConfigError(
        "run.precision = fp16 needs a CUDA device: LibTorch's CPU autocast has bfloat16 only. "
        "Use run.precision=bf16 (or fp32) on CPU, or train with --device cuda");
  }
  // Process-wide, before any CUDA work: the fp32 of an fp32 run is IEEE float32 only with
  // run.tf32: false (cuDNN convolutions default to TF32, as in PyTorch).
  if (cfg.run.tf32) compat::set_tf32({*cfg.run.tf32, *cfg.run.tf32});
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
  // Many files: the world's ranks split their validation (collective; a single file: local).
  startup.agree();
  m.train_data = data::Dataset::open(cfg.data.train, expect, cfg.data.read_options(),
                                     m.env.control.world.get());
  if (!cfg.data.val.empty()) {
    data::DatasetExpectation val_expect;
    val_expect.seq_len = seq_len;
    val_expect.config_key = "data.val";
    startup.agree();
    m.val_data = data::Dataset::open(cfg.data.val, val_expect, cfg.data.read_options(),
                                     m.env.control.world.get());
  }

  // What reading takes in memory, from the metadata, before a batch is allocated: a shape that
  // declares samples beyond memory is exit 3 with the figure (docs/DATA.md, "Memory").
  data::check_reader_memory(
      data::reader_memory(m.train_data->info(), m.micro_batch, cfg.data.prefetch), 0, "data.train",
      m.train_data->info());
  if (m.val_data) {
    data::check_reader_memory(
        data::reader_memory(m.val_data->info(), cfg.eval.batch_size, cfg.data.prefetch), 0,
        "data.val", m.val_data->info());
  }
  check_model_input_fits_data(model_section, m.train_data->info(), "data.train");
  if (m.val_data) check_model_input_fits_data(model_section, m.val_data->info(), "data.val");
  torch::manual_seed(cfg.run.seed);
  model::ModelContext ctx{m.env.comms.tp, grid.tp_rank(), grid.tp_size(), cfg.run.seed,
                          pipeline_part(cfg, grid.pp_rank())};
  m.model = model::build_model(model_section, ctx);
  m.model_name = model_section.get<std::string>("name", "mlp");
  config.check_unknown_keys();
  // Only language models have a vocabulary (reading the key elsewhere would record it).
  const std::int64_t vocab = m.model->task() == "language_model" && m.model_name != "torchscript"
                                 ? model_section.get<std::int64_t>("vocab_size", 0)
                                 : 0;
  const bool trial_forward = grid.pp_size() == 1;  // a stage cannot run alone
  eval::check_data_fits_model(*m.model, *m.train_data, "data.train", vocab,
                              eval::FitAdvice::kTraining, trial_forward);
  if (m.val_data) {
    eval::check_data_fits_model(*m.model, *m.val_data, "data.val", vocab,
                                eval::FitAdvice::kTraining, trial_forward);
  }

  const auto& train_info = m.train_data->info();
  m.sampler = std::make_unique<data::TrainSampler>(
      train_info.num_samples, m.global_batch, cfg.run.seed, cfg.data.shuffle,
      data::default_sample_order(train_info.num_samples), train_info.sources);
  m.total_steps = plan::planned_steps(m.train_data->info().num_samples, m.global_batch,
                                      cfg.run.epochs, cfg.run.max_steps);

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
}

void Trainer::Impl::build(const std::string& resume) {
  Impl& m = *this;
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  // Collectives from here on.
  if (m.env.device.cuda_index >= 0) m.device = torch::Device(torch::kCUDA, m.env.device.cuda_index);
  m.model->to(m.device);
  const bool shard = cfg.parallel.shard_optimizer;
  // A parameter two pipeline stages hold gets a gradient bucket of its own on both, so a sharded
  // optimizer owns the same elements of it on each (GradientFinalizer::set_stage_copies).
  const std::vector<model::StageCopy> copies = m.model->stage_copies();
  parallel::FlatLayout layout{cfg.parallel.bucket_bytes(), shard ? grid.dp_size() : 1, {}};
  for (const auto& copy : copies) layout.own_bucket.push_back(copy.name);
  m.flat = std::make_unique<parallel::FlatParameters>(*m.model, layout);
  parallel::broadcast_parameters(*m.flat, *m.env.comms.dp);
  parallel::broadcast_buffers(*m.model, *m.env.comms.dp);
  m.sync = std::make_unique<parallel::GradientSynchronizer>(
      *m.flat, m.env.comms.dp, cfg.parallel.bucket_bytes(), cfg.parallel.overlap, shard);
  if (shard) {
    m.shards = std::make_unique<parallel::DataParallelShards>(
        *m.flat, m.sync->bucket_offsets(), m.sync->bucket_sizes(), m.env.comms.dp);
  }
  std::vector<torch::Tensor> replicated;
  for (const auto& e : m.flat->entries()) {
    if (m.model->shard_info(e.name).split_dim < 0) replicated.push_back(e.param);
  }
  m.finalizer =
      std::make_unique<parallel::GradientFinalizer>(*m.sync, m.env.comms.tp, std::move(replicated));
  if (!copies.empty()) {
    std::vector<std::pair<torch::Tensor, int>> pairs;
    for (const auto& copy : copies) {
      pairs.emplace_back(m.flat->entry(copy.name).param,
                         plan::stage_rank(copy.other_stage, grid.pp_size()));
    }
    m.finalizer->set_stage_copies(m.env.comms.pp, std::move(pairs));
  }
  m.parameters = m.model->logical_parameter_count();
  if (grid.pp_size() > 1) {
    m.pipeline = std::make_unique<PipelineStep>(
        PipelineStep::Parts{*m.model, *m.sync, m.env, cfg, m.device});
    // The whole model's: every stage's, a parameter two stages hold counted once.
    for (const auto& copy : copies) {
      if (copy.primary) continue;
      std::int64_t n = 1;
      for (auto d : m.model->shard_info(copy.name).logical_shape) n *= d;
      m.parameters -= n;
    }
    m.parameters = m.env.control.pp->reduce(m.parameters, comm::ReduceOp::kSum);
  }
  if (m.shards && m.model->waits_for_parameters()) {
    auto* shards = m.shards.get();
    m.model->set_parameter_wait([shards](const torch::Tensor& p) { shards->wait_parameter(p); });
  }
  m.optimizer = std::make_unique<Optimizer>(*m.flat, cfg.optim, m.shards.get());
  m.scaler = std::make_unique<LossScaler>(cfg.optim.loss_scale, cfg.loss_scaling);
  m.steps = std::make_unique<StepRunner>(StepRunner::Parts{
      *m.model, *m.flat, *m.sync, *m.finalizer, *m.optimizer, *m.scaler, m.env, cfg, m.device,
      [&m]() { return m.ckpt ? m.ckpt->wait_for_copy() : 0.0; }, m.shards.get(), m.pipeline.get()});
  const eval::Metric metric = cfg.eval.metric_for(m.model->task());
  checkpoint::ManagerOptions options;
  options.keep = cfg.checkpoint.keep;
  options.keep_best = cfg.checkpoint.keep_best;
  options.higher_is_better = eval::higher_is_better(metric);
  options.background = cfg.checkpoint.background;
  options.metric_name = eval::metric_name(metric);
  m.ckpt = std::make_unique<checkpoint::CheckpointManager>(cfg.run.dir, grid, options);
  m.resume(resume);
  m.saves = std::make_unique<checkpoint::CheckpointSchedule>(
      cfg.checkpoint, m.resumed_from.empty() ? -1 : m.state.step);
  m.evals =
      std::make_unique<eval::EvalSchedule>(cfg.eval, m.val_data != nullptr, metric, m.state.eval);
}

void Trainer::Impl::resume(const std::string& resume) {
  auto path = ckpt->resolve(resume);
  if (!path) {
    if (resume == "auto") log::debug("no checkpoint to resume from: starting at step 0");
    return;
  }
  ShardedState sharded_state;
  auto records = state_records(*model, *flat, *optimizer, /*with_optimizer=*/true,
                               /*snapshot_buffers=*/false, shards.get(), &sharded_state);
  checkpoint::Loaded loaded = ckpt->load(*path, records);
  restore_sharded_state(sharded_state, shards.get());
  const auto& ts = loaded.trainer_state;
  state = TrainerState::from_json(ts);
  // The same broadcast manifest and data on every rank: every rank finds the same problems.
  const auto problems =
      resume_state_problems(loaded.manifest, {sampler->num_samples(), env.runtime.world_size()});
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += (list.empty() ? "" : "; ") + p;
    throw AgreedCheckpointError(
        str("checkpoint ", loaded.path, ": manifest.json: ", list,
            ": the manifest was edited or damaged after it was written (its checksum was "
            "recomputed); resume from another checkpoint"));
  }
  const data::SampleOrder order =
      restore_data_state(ts, train_data->info(), cfg.data.allow_changed_files, state.sampler);
  if (order != sampler->order()) {  // the checkpoint's order continues (docs/DATA.md)
    sampler =
        std::make_unique<data::TrainSampler>(sampler->num_samples(), global_batch, cfg.run.seed,
                                             cfg.data.shuffle, order, sampler->sources());
  }
  optimizer->set_steps(ts.value("optimizer_steps", state.step - state.skipped_steps));
  if (scaler->enabled()) scaler->restore(ts.value("loss_scaler", nlohmann::json()));
  resumed_from = loaded.path;
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
    const int saved_pp = saved_grid.value("pp", 1);
    log::info(str("note: the checkpoint was written on a dp=", saved_grid.value("dp", 0),
                  saved_pp > 1 ? str(" x pp=", saved_pp) : std::string(),
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

void Trainer::Impl::save(std::int64_t step, checkpoint::SaveReason why) {
  const auto start = Clock::now();
  parameters_ready();
  runtime::trace::Scope traced(0, "checkpoint save", step);
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
  content.tensors = state_records(*model, *flat, *optimizer, /*with_optimizer=*/true,
                                  /*snapshot_buffers=*/true, shards.get());
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
  ckpt->save(std::move(content));
  saves->saved(step);
  phases.checkpoint += seconds_since(start);
  log::debug(str("checkpoint of step ", step, " (", checkpoint::save_reason_name(why),
                 ") handed over in ", format_seconds(ckpt->last_blocking_seconds())));
}

LedgerFacts Trainer::Impl::ledger_facts(std::int64_t steps) const {
  const auto& grid = env.grid;
  LedgerFacts facts;
  facts.model_name = model_name;
  facts.task = model->task();
  facts.parameters = parameters;
  facts.forward_flops_per_sample = model->forward_flops_per_sample();
  facts.flops_source = model->flops_source();
  facts.tokens_per_sample = model->task() == "language_model" ? train_data->info().seq_len : 1;
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
  facts.precision = precision_name(cfg.run.precision);
  facts.tf32_matmul = compat::tf32().matmul;
  facts.tf32_cudnn = compat::tf32().cudnn;
  facts.tf32_source = cfg.run.tf32 ? "run.tf32" : "LibTorch default";
  facts.skipped_steps = state.skipped_steps;
  facts.loss_scale = scaler->enabled() ? scaler->scale() : 0;
  facts.peak_device_memory_bytes = monitor ? monitor->peak_device_memory_bytes() : -1;
  facts.peak_tensor_bytes = peak_tensor_bytes();
  add_memory_facts(facts, *model, *flat, *optimizer, cfg);
  return facts;
}

Trainer::~Trainer() = default;

const TrainConfig& Trainer::config() const {
  return impl_->cfg;
}

std::vector<std::pair<std::string, torch::Tensor>> Trainer::local_parameters() const {
  impl_->parameters_ready();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : impl_->model->named_parameters(true)) {
    out.emplace_back(item.key(), item.value().detach().cpu());
  }
  return out;
}

bool Trainer::Impl::run_eval(std::int64_t step, comm::StopAgreement& stop, RunLog& log,
                             TrainOutcome& outcome) {
  const auto eval_start = Clock::now();
  parameters_ready();
  runtime::trace::Scope traced(0, "eval", step);
  if (cfg.debug.stop_eval_step == step &&
      (cfg.debug.stop_rank < 0 || cfg.debug.stop_rank == env.runtime.world_rank())) {
    runtime::request_stop(SIGUSR1);  // tests: as if the signal arrived as this evaluation starts
  }
  eval::EvalOptions options;
  options.batch_size = cfg.eval.batch_size;
  options.bf16 = cfg.run.precision == Precision::kBf16;
  options.fp16 = cfg.run.precision == Precision::kFp16;
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
    return false;
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
  if (evals->record(result, step)) {
    outcome.reason = evals->early_stop_reason();
    return true;
  }
  return false;
}

TrainOutcome Trainer::run() {
  Impl& m = *impl_;
  const TrainConfig& cfg = m.cfg;
  const auto& grid = m.env.grid;
  runtime::set_outcome_step(m.state.step);  // a resumed run that trains no step names its step
  RunReport report(m.is_rank0(), cfg.run.dir, cfg.logging.progress, m.total_steps,
                   /*resume_step=*/m.state.step);
  RunLog& log = report.log();
  log::info(str("training ", m.model_name, " (", m.parameters, " parameters) on ", grid.describe(),
                ", ", m.global_batch, " samples per step (", m.micro_batch, " per rank x ",
                grid.dp_size(), " dp ranks x ", cfg.optim.grad_accumulation, " micro-batches), ",
                m.total_steps, " steps (", m.sampler->steps_per_epoch(), " per epoch), run dir ",
                cfg.run.dir));
  {
    const auto& info = m.train_data->info();
    log::info(str("data.train: ", info.num_samples, " samples in ", info.files.size(),
                  info.files.size() == 1 ? " file" : " files",
                  info.sources.empty() ? std::string() : str(", ", info.sources.size(), " sources"),
                  "; sample order ", data::sample_order_name(m.sampler->order()),
                  ", sampler memory ", format_bytes(static_cast<double>(m.sampler->memory_bytes())),
                  " per rank; reader memory ",
                  format_bytes(data::reader_memory(info, m.micro_batch, cfg.data.prefetch).total()),
                  " per rank"));
  }
  if (m.state.step >= m.total_steps && m.state.step > 0) {
    // A chained or requeued job after the run finished: nothing to train or overwrite, but the
    // job that saved the final checkpoint may have died before its bookkeeping.
    log::info(str("run ", cfg.run.dir, " is already complete at step ", m.state.step));
    LedgerFacts facts = m.ledger_facts(0);
    facts.steps = m.state.step;
    facts.samples_trained = m.state.sampler.consumed_samples;
    report.finish_completed(m.state.step, facts, m.resumed_from);
    return TrainOutcome{m.state.step, "already complete", 0};
  }
  report.clear_completion();  // more steps to come
  if (cfg.logging.tensorboard) log.enable_tensorboard(cfg.run.dir + "/tensorboard");
  m.monitor = std::make_unique<runtime::ResourceMonitor>(m.env.device.cuda_index);
  // Tests: a known amount of touched memory, so the recorded peak must rise by that much.
  m.debug_memory.assign(static_cast<std::size_t>(cfg.debug.extra_memory_mb) << 20, 1);
  m.monitor->sample();
  TraceSession tracer(
      cfg.logging.trace, cfg.logging.trace_max_mb,
      trace_slices_per_step(
          cfg.optim.grad_accumulation,
          // sharded: reduce-scatter, all-gather and a gather wait per bucket
          static_cast<std::int64_t>(m.sync->bucket_sizes().size()) * (m.shards ? 3 : 1),
          grid.tp_size() > 1 ? 64 * cfg.optim.grad_accumulation : 0),
      cfg.run.dir, *m.env.control.world);
  ProfileSession profiler(cfg.logging.profile, cfg.logging.profile_warmup, cfg.run.dir,
                          m.env.runtime.world_rank());

  const std::int64_t first_step = m.state.step;
  // debug.stage_inputs: the GPU step path on CPU (staged inputs, metric sums read after the norm).
  model::defer_metric_reads_on_cpu(cfg.debug.stage_inputs);
  data::TrainLoader loader(
      *m.train_data, *m.sampler, m.state.sampler, grid.dp_rank(), grid.dp_size(), cfg.data.prefetch,
      m.state.sampler.global_step + (m.total_steps - first_step), cfg.optim.grad_accumulation,
      m.device.is_cuda()       ? data::InputStaging::kPinned
      : cfg.debug.stage_inputs ? data::InputStaging::kCopy
                               : data::InputStaging::kNone,
      m.device.is_cuda() && comm::DeviceCopier::available()
          ? std::make_shared<comm::DeviceCopier>(m.device)
          : nullptr);
  Deadline deadline(cfg.run.time_limit_s, cfg.run.time_margin_s, *m.env.control.world);
  // Before the first save has been timed, assume 100 MB/s for the parameters and optimizer state.
  const double guessed_save_s = static_cast<double>(m.flat->numel()) * 12 / 100e6;
  comm::StopAgreement stop_agreement(*m.env.control.world);
  TrainOutcome outcome;
  outcome.reason = "completed";
  // From here a stop signal is agreed on and acted on at a step boundary (save, exit 75); before
  // (opening files, resuming) it ended the process at once: there was nothing to save.
  runtime::StopModeScope agree_on_stop(runtime::StopMode::kAgree);
  bool stop = false;
  if (m.evals->owes(m.state.step)) {
    // A stop signal interrupted this step's evaluation in the previous job: run it first, and
    // save the step again with its metric so keep-best retention sees it.
    log.line(str("evaluating step ", m.state.step, ", whose evaluation a stop interrupted"));
    stop = m.run_eval(m.state.step, stop_agreement, log, outcome);
    if (m.metric_step == m.state.step) m.save(m.state.step, checkpoint::SaveReason::kStop);
    if (stop_agreement.signal() != 0) {
      // Interrupted again: the checkpoint of this step still owes the evaluation.
      outcome.reason =
          str(runtime::signal_name(stop_agreement.signal()), " received: saved, requeue to resume");
      outcome.exit_code = kExitRequeue;
      stop = true;
    }
  }

  // One checkpoint record per committed save, once its outcome is known on every rank.
  std::string recorded_checkpoint;
  auto record_checkpoint = [&] {
    const std::string& path = m.ckpt->last_saved_path();
    if (path.empty() || path == recorded_checkpoint) return;
    recorded_checkpoint = path;
    log.record({{"type", "checkpoint"},
                {"step", checkpoint::parse_step_dir_name(std::filesystem::path(path).filename())
                             .value_or(m.saves->last_saved_step())},
                {"path", path},
                {"bytes", m.ckpt->last_save_bytes()},
                {"save_seconds", m.ckpt->last_save_seconds()},
                {"blocking_seconds", m.ckpt->last_blocking_seconds()}});
  };
  IntervalStats interval;
  data::SamplerState interval_start = m.state.sampler;  // per-source counts of the interval
  std::vector<data::Batch> micro;
  // The loop's time after a step (logging, the stop agreement) outside evaluations and saves,
  // counted with the next step: training time is the loop's time less evaluations and saves.
  double carried = 0;
  while (m.state.step < m.total_steps && !stop) {
    tracer.before_step(m.state.step + 1);
    profiler.before_step(m.state.step + 1);
    const auto step_start = Clock::now();
    const double wait_before = loader.wait_seconds();
    if (!loader.next_step(micro)) {
      throw Error(str("the data stream ended early at step ", m.state.step, " (internal error)"));
    }
    if (runtime::trace::on()) runtime::trace::record(0, "data wait", step_start, Clock::now());
    const double waited = loader.wait_seconds() - wait_before;
    m.phases.data_wait += waited;
    interval.data_wait += waited;
    const StepResult r = m.steps->step(micro, m.state.step, m.total_steps, m.phases);
    if (runtime::trace::on()) {
      runtime::trace::record(0, "step", step_start, Clock::now(), m.state.step + 1);
    }
    m.state.sampler = loader.state();
    if (r.skipped) ++m.state.skipped_steps;
    ++m.state.step;
    const double step_seconds = seconds_since(step_start) + carried;
    interval.add(r, m.global_batch, step_seconds);
    m.phases.train_wall += step_seconds;
    const auto after_step = Clock::now();
    double excluded = 0;  // evaluation and checkpoint saves of this iteration

    const std::int64_t step = m.state.step;
    log.live(step, m.state.sampler.epoch, r.local_loss, r.lr, interval.samples_per_second(),
             m.monitor->last().rss_bytes);
    if (step % cfg.logging.every_steps == 0 || step == m.total_steps) {
      m.steps->resolve_phases(m.phases);  // GPU: the device times of the interval's phases
      auto extra = throughput_fields(
          interval.samples_per_second(), m.model->forward_flops_per_sample(),
          m.ledger_facts(0).tokens_per_sample, grid.world_size(), cfg.logging.peak_flops);
      extra["resources"] = resource_fields(m.monitor->sample(), *m.env.control.world);
      if (m.sampler->is_mixture()) {
        extra["samples_per_source"] = source_counts(*m.sampler, interval_start, m.state.sampler);
        interval_start = m.state.sampler;
      }
      log_interval(interval, step, m.state.sampler.epoch, *m.env.control.dp, log, extra);
      interval = IntervalStats{};
    }
    if (m.evals->due(step, m.total_steps)) {
      const auto eval_start = Clock::now();
      if (m.run_eval(step, stop_agreement, log, outcome)) stop = true;
      excluded += seconds_since(eval_start);
    }

    // Every rank agrees before anyone acts (docs/ARCHITECTURE.md): one collective per step
    // combines stop signals, the wall-time deadline and the time-based checkpoint interval.
    comm::StopRequest local;
    local.signal = runtime::stop_signal_received();
    if (cfg.debug.stop_step >= 0 && step == cfg.debug.stop_step &&
        (cfg.debug.stop_rank < 0 || cfg.debug.stop_rank == m.env.runtime.world_rank())) {
      local.signal = SIGUSR1;
    }
    const double save_estimate =
        m.ckpt->last_save_seconds() > 0 ? m.ckpt->last_save_seconds() : guessed_save_s;
    local.deadline = deadline.reached(save_estimate);
    local.save_due = m.saves->time_due();
    local.save_pending = m.ckpt->has_pending();
    local.save_writing = m.ckpt->writing();
    runtime::set_outcome_step(step);
    const comm::StopRequest agreed = stop_agreement.agree(local);
    // A background save that every rank has finished writing: collect its outcome now (no
    // waiting), so a failed save (disk full) ends the run at once, not at the next save.
    if (agreed.save_finished()) {
      m.ckpt->wait();
      record_checkpoint();
    }
    bool requeue = false;
    if (stop_agreement.signal() != 0) {
      outcome.reason =
          str(runtime::signal_name(stop_agreement.signal()), " received: saved, requeue to resume");
      requeue = true;
    } else if (agreed.deadline) {
      outcome.reason = str("time limit (", deadline.source(), "): saved, requeue to resume");
      requeue = true;
    }
    if (requeue) {
      outcome.exit_code = kExitRequeue;
      stop = true;
    }
    const auto why = m.saves->reason(step, stop || step == m.total_steps, requeue, agreed.save_due);
    if (why != checkpoint::SaveReason::kNone) {
      const auto save_start = Clock::now();
      if (m.ckpt->has_pending()) {  // save() would wait for it first anyway
        m.ckpt->wait();
        record_checkpoint();
      }
      m.save(step, why);
      if (!m.ckpt->has_pending()) record_checkpoint();  // a synchronous save is committed
      excluded += seconds_since(save_start);
    }
    carried = std::max(0.0, seconds_since(after_step) - excluded);
    tracer.after_step(step, *m.env.control.world, [&m] { m.ckpt->wait(); });
    profiler.after_step(step);
  }
  m.parameters_ready();
  tracer.finish(*m.env.control.world);
  profiler.finish();
  {
    const auto start = Clock::now();
    m.ckpt->wait();  // the last save is committed before the job reports its outcome
    m.phases.checkpoint += seconds_since(start);
    record_checkpoint();
  }
  m.steps->resolve_phases(m.phases);
  m.phases.total_wall = seconds_since(m.started);
  outcome.steps = m.state.step;
  report.finish(outcome, m.phases, m.ledger_facts(m.state.step - first_step),
                m.ckpt->last_saved_path(), *m.env.control.world);
  return outcome;
}

}  // namespace hpctrain::train
