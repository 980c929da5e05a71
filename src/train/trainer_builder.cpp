#include "trainer_builder.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <mutex>

#include "data_state.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/reader_memory.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/resume_checks.hpp"
#include "init_weights.hpp"
#include "input_checks.hpp"
#include "pipeline_step.hpp"
#include "run_files.hpp"
#include "trainer_checkpoint.hpp"

namespace hpctrain::train {

std::int64_t TrainerParts::tokens_per_sample() const {
  return model->task() == Task::kLanguageModel ? train_data->info().seq_len : 1;
}

void TrainerBuilder::build(TrainerParts& p, checkpoint::Checkpointer::Content content) {
  // One error, one message (comm/startup_agreement.hpp).
  comm::StartupAgreement startup(*p.env.control.world);
  startup.run([&] { validate(p, startup); });
  // The flight recorder's size and where its files go (docs/OBSERVABILITY.md).
  runtime::FlightRecorder::configure(static_cast<std::size_t>(p.cfg.logging.flight_records));
  runtime::FlightRecorder::set_directory(p.cfg.run.dir + "/flight", p.env.runtime.world_rank(),
                                         runtime::node_name(p.env.runtime.host()));
  // Collectives from here on.
  build_step(p);
  std::unique_ptr<checkpoint::CheckpointManager> manager = resume(p);
  // Pretrained weights start a fresh run only: a resumed one continues from its checkpoint.
  if (p.resumed_from.empty() && !p.cfg.model.init_from.empty()) {
    init_weights_from(*p.model, p.cfg.model.init_from, p.env, *p.dp);
  }
  // Before the first save has been timed, assume 100 MB/s for the parameters and optimizer state.
  std::int64_t local_parameters = 0;
  for (const auto& e : p.dp->layout()) local_parameters += e.numel;
  const double guessed_save_s = static_cast<double>(local_parameters) * 12 / 100e6;
  p.checkpoints = std::make_unique<checkpoint::Checkpointer>(
      std::move(manager), p.cfg.checkpoint, p.resumed_from.empty() ? -1 : p.state.step,
      guessed_save_s, std::move(content));
  p.evals = std::make_unique<eval::EvalSchedule>(
      p.cfg.eval, p.val_data != nullptr, p.cfg.eval.metric_for(p.model->task()), p.state.eval);
}

void TrainerBuilder::validate(TrainerParts& p, comm::StartupAgreement& startup) {
  p.cfg = TrainConfig::from(config_, default_run_dir_);
  const TrainConfig& cfg = p.cfg;
  const auto& grid = p.env.grid;
  p.debug = DebugHooks(cfg.debug, p.env.runtime.world_rank());
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
  if (cfg.run.precision == Precision::kFp16 && p.env.device.cuda_index < 0) {
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
  const model::ModelSpec& spec = cfg.model;
  p.micro_batch = cfg.data.batch_size;
  p.global_batch = cfg.data.batch_size * grid.dp_size() * cfg.optim.grad_accumulation;
  data::DatasetExpectation expect;
  expect.seq_len = spec.seq_len;
  expect.min_samples = p.global_batch;
  expect.config_key = "data.train";
  // Many files: the world's ranks split their validation (collective; a single file: local).
  startup.agree();
  p.train_data = data::Dataset::open(cfg.data.train, expect, cfg.data.read_options(),
                                     p.env.control.world.get());
  if (!cfg.data.val.empty()) {
    data::DatasetExpectation val_expect;
    val_expect.seq_len = spec.seq_len;
    val_expect.config_key = "data.val";
    startup.agree();
    p.val_data = data::Dataset::open(cfg.data.val, val_expect, cfg.data.read_options(),
                                     p.env.control.world.get());
  }

  // What reading takes in memory, from the metadata, before a batch is allocated: a shape that
  // declares samples beyond memory is exit 3 with the figure (docs/DATA.md, "Memory").
  data::check_reader_memory(
      data::reader_memory(p.train_data->info(), p.micro_batch, cfg.data.prefetch), 0, "data.train",
      p.train_data->info());
  if (p.val_data) {
    data::check_reader_memory(
        data::reader_memory(p.val_data->info(), cfg.eval.batch_size, cfg.data.prefetch), 0,
        "data.val", p.val_data->info());
  }
  check_model_input_fits_data(spec, p.train_data->info(), "data.train");
  if (p.val_data) check_model_input_fits_data(spec, p.val_data->info(), "data.val");
  torch::manual_seed(cfg.run.seed);
  model::ModelContext ctx{p.env.comms.tp, grid.tp_rank(), grid.tp_size(), cfg.run.seed,
                          pipeline_part(cfg, grid.pp_rank())};
  auto model_section = config_.section("model");
  p.model = model::build_model(model_section, ctx);
  config_.check_unknown_keys();
  const std::int64_t vocab = spec.vocab_size;
  const bool trial_forward = grid.pp_size() == 1;  // a stage cannot run alone
  eval::check_data_fits_model(*p.model, *p.train_data, "data.train", vocab,
                              eval::FitAdvice::kTraining, trial_forward);
  if (p.val_data) {
    eval::check_data_fits_model(*p.model, *p.val_data, "data.val", vocab,
                                eval::FitAdvice::kTraining, trial_forward);
  }

  const auto& train_info = p.train_data->info();
  p.sampler = std::make_unique<data::TrainSampler>(
      train_info.num_samples, p.global_batch, cfg.run.seed, cfg.data.shuffle,
      data::default_sample_order(train_info.num_samples), train_info.sources);
  p.total_steps = plan::planned_steps(p.train_data->info().num_samples, p.global_batch,
                                      cfg.run.epochs, cfg.run.max_steps);

  if (resume_ == "none" && !checkpoint::list_checkpoints(cfg.run.dir).empty()) {
    throw ConfigError(str("run.dir = ", cfg.run.dir,
                          " already holds checkpoints; --resume none "
                          "would start a new run over them. Resume it (--resume auto), or choose "
                          "another run.dir"));
  }
  p.config_text = config_.dump();
  if (p.is_rank0()) {
    create_run_dir(cfg.run.dir);
    runtime::set_aside_flight_files(cfg.run.dir);  // an earlier job's: not mixed with this job's
    const std::string error = write_run_file(
        cfg.run.dir + "/config.yaml",
        "# resolved configuration (file, --set overrides and defaults) written by hpctrain\n" +
            p.config_text);
    if (!error.empty()) throw ConfigError(str("run.dir = ", cfg.run.dir, ": ", error));
  }
}

void TrainerBuilder::build_step(TrainerParts& p) {
  const TrainConfig& cfg = p.cfg;
  const auto& grid = p.env.grid;
  if (p.env.device.cuda_index >= 0) p.device = torch::Device(torch::kCUDA, p.env.device.cuda_index);
  p.model->to(p.device);
  const parallel::ShardMode shard = cfg.parallel.shard;
  // A parameter two pipeline stages hold gets a gradient bucket of its own on both, so a sharded
  // optimizer owns the same elements of it on each (GradientFinalizer::set_stage_copies).
  const std::vector<model::StageCopy> copies = p.model->stage_copies();
  model::Model& model = *p.model;
  parallel::StrategyInputs inputs{model, cfg.model.name};
  inputs.units = model.parameter_units();
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (model.shard_info(item.key()).split_dim < 0) inputs.tp_replicated.push_back(item.key());
  }
  inputs.waits_for_parameters = model.waits_for_parameters();
  inputs.set_parameter_wait = [&model](std::function<void(const torch::Tensor&)> wait) {
    model.set_parameter_wait(std::move(wait));
  };
  inputs.set_unit_hooks = [&model](parallel::ParameterUnitHooks* hooks) {
    model.set_unit_hooks(hooks);
  };
  inputs.config = cfg.parallel;
  inputs.bucket_bytes = cfg.parallel.bucket_bytes();
  inputs.overlap = cfg.parallel.overlap;
  inputs.dp = p.env.comms.dp;
  inputs.tp = p.env.comms.tp;
  inputs.dp_control = p.env.control.dp;
  if (shard != parallel::ShardMode::kNone) {
    const comm::ShardGroups groups =
        comm::make_shard_groups(p.env.runtime, grid.dp_comm(), p.env.comms, p.env.control.dp,
                                p.env.device, cfg.parallel.shard_group);
    inputs.shard = groups.shard;
    inputs.replica = groups.replica;
    inputs.shard_control = groups.shard_control;
  }
  for (const auto& copy : copies) {
    inputs.stage_copies.emplace_back(copy.name, plan::stage_rank(copy.other_stage, grid.pp_size()));
    if (!copy.primary) inputs.secondary_copies.push_back(copy.name);
  }
  inputs.pp = p.env.comms.pp;
  p.dp = parallel::make_strategy(std::move(inputs));
  p.parameters = p.model->logical_parameter_count();
  if (grid.pp_size() > 1) {
    p.pipeline = std::make_unique<PipelineStep>(
        PipelineStep::Parts{*p.model, *p.dp->synchronizer(), p.env, cfg, p.device});
    // The whole model's: every stage's, a parameter two stages hold counted once.
    for (const auto& copy : copies) {
      if (copy.primary) continue;
      std::int64_t n = 1;
      for (auto d : p.model->shard_info(copy.name).logical_shape) n *= d;
      p.parameters -= n;
    }
    p.parameters = p.env.control.pp->reduce(p.parameters, comm::ReduceOp::kSum);
  }
  p.optimizer =
      std::make_unique<Optimizer>(p.dp->segments(), cfg.optim, shard != parallel::ShardMode::kNone);
  p.scaler = std::make_unique<LossScaler>(cfg.optim.loss_scale, cfg.loss_scaling);
  p.steps = std::make_unique<StepRunner>(StepRunner::Parts{
      *p.model, *p.dp, *p.optimizer, *p.scaler, p.env, cfg, p.debug, p.device,
      [&p]() { return p.checkpoints ? p.checkpoints->wait_for_copy() : 0.0; }, p.pipeline.get()});
}

std::unique_ptr<checkpoint::CheckpointManager> TrainerBuilder::resume(TrainerParts& p) {
  runtime::PhaseScope phase(runtime::Phase::kCheckpointLoad);
  const TrainConfig& cfg = p.cfg;
  const eval::Metric metric = cfg.eval.metric_for(p.model->task());
  checkpoint::ManagerOptions options;
  options.keep = cfg.checkpoint.keep;
  options.keep_best = cfg.checkpoint.keep_best;
  options.higher_is_better = eval::higher_is_better(metric);
  options.background = cfg.checkpoint.background;
  options.metric_name = eval::metric_name(metric);
  auto ckpt = std::make_unique<checkpoint::CheckpointManager>(cfg.run.dir, p.env.grid, options);

  // A manifest resealed with impossible values verifies by checksum: `auto` skips it like a
  // damaged one and falls back to an older checkpoint (docs/CHECKPOINTS.md, "Trust").
  const ResumeFacts facts{p.sampler->num_samples(), p.env.runtime.world_size()};
  auto path = ckpt->resolve(resume_, [facts](const nlohmann::json& manifest) {
    if (manifest.contains("trainer_state")) TrainerState::from_json(manifest.at("trainer_state"));
    std::string list;
    for (const auto& problem : resume_state_problems(manifest, facts))
      list += (list.empty() ? "" : "; ") + problem;
    return list;
  });
  if (!path) {
    if (resume_ == "auto") log::debug("no checkpoint to resume from: starting at step 0");
    return ckpt;
  }
  ShardedState sharded_state;
  p.dp->parameters_ready();
  auto records = state_records(*p.model, *p.dp, *p.optimizer, /*with_optimizer=*/true,
                               /*snapshot_buffers=*/false, &sharded_state);
  checkpoint::Loaded loaded = ckpt->load(*path, records);
  restore_sharded_state(sharded_state, *p.dp);
  const auto& ts = loaded.trainer_state;
  p.state = TrainerState::from_json(ts);
  // The same broadcast manifest and data on every rank: every rank finds the same problems.
  const auto problems = resume_state_problems(
      loaded.manifest, {p.sampler->num_samples(), p.env.runtime.world_size()});
  if (!problems.empty()) {
    std::string list;
    for (const auto& problem : problems) list += (list.empty() ? "" : "; ") + problem;
    throw AgreedCheckpointError(
        str("checkpoint ", loaded.path, ": manifest.json: ", list,
            ": the manifest was edited or damaged after it was written (its checksum was "
            "recomputed); resume from another checkpoint"));
  }
  const data::SampleOrder order =
      restore_data_state(ts, p.train_data->info(), cfg.data.allow_changed_files, p.state.sampler);
  if (order != p.sampler->order()) {  // the checkpoint's order continues (docs/DATA.md)
    p.sampler =
        std::make_unique<data::TrainSampler>(p.sampler->num_samples(), p.global_batch, cfg.run.seed,
                                             cfg.data.shuffle, order, p.sampler->sources());
  }
  p.optimizer->set_steps(ts.value("optimizer_steps", p.state.step - p.state.skipped_steps));
  if (p.scaler->enabled()) p.scaler->restore(ts.value("loss_scaler", nlohmann::json()));
  p.resumed_from = loaded.path;
  const auto& grid = p.env.grid;
  if (loaded.same_world && loaded.rng_state.defined()) {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(loaded.rng_state);
  } else {
    // Dropout draws differ from an uninterrupted run; the sample stream does not (it depends on
    // the seed and the position only).
    torch::manual_seed(cfg.run.seed + 1000003ULL * static_cast<std::uint64_t>(p.state.step) +
                       static_cast<std::uint64_t>(p.env.runtime.world_rank()));
  }
  log::info(str("resumed from ", loaded.path, " at step ", p.state.step, " (epoch ",
                p.state.sampler.epoch, ", ", p.state.sampler.consumed_samples,
                " samples consumed)"));
  const auto saved_grid = loaded.manifest.value("grid", nlohmann::json::object());
  if (!loaded.same_grid) {
    const int saved_pp = saved_grid.value("pp", 1);
    log::info(str("note: the checkpoint was written on a dp=", saved_grid.value("dp", 0),
                  saved_pp > 1 ? str(" x pp=", saved_pp) : std::string(),
                  " x tp=", saved_grid.value("tp", 0), " grid, this run is ", grid.describe(),
                  ": tensors were resharded, the sample stream continues at sample ",
                  p.state.sampler.consumed_samples, " with ", p.global_batch,
                  " samples per step, and dropout randomness is reseeded"));
  }
  if (p.state.step >= p.total_steps) {
    log::info(str("the checkpoint is at step ", p.state.step,
                  ", which is not before the last step (", p.total_steps,
                  "): nothing left to train"));
  }
  return ckpt;
}

}  // namespace hpctrain::train
