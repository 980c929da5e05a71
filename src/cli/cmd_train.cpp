// hpctrain train: data-parallel (and tensor-parallel) training from a YAML config.

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/train_config.hpp"
#include "hpctrain/train/trainer.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume = "auto";
  bool keep_global_batch = false;
  std::string outcome_file;  ///< --outcome-file (default run.dir/outcome.json)
};

// The global batch recorded in the checkpoint a resume would start from (0: none, or a checkpoint
// without the field). Local; reads one manifest.json, no checksums (the trainer verifies later).
std::int64_t checkpoint_global_batch(const std::string& run_dir, const std::string& resume) {
  std::optional<std::string> dir;
  if (resume == "auto") {
    dir = checkpoint::read_latest(run_dir);
  } else if (resume != "none" && !resume.empty()) {
    dir = std::filesystem::is_directory(resume) ? resume : run_dir + "/checkpoints/" + resume;
  }
  if (!dir) return 0;
  // Not a regular file (a FIFO would block the open): the trainer's verification reports it.
  const std::string manifest_path = *dir + "/" + checkpoint::kManifestFile;
  if (runtime::path_type(manifest_path) != runtime::PathType::kRegular) return 0;
  std::ifstream in(manifest_path);
  if (!in) return 0;
  auto manifest = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!manifest.is_object()) return 0;
  auto state = manifest.value("trainer_state", nlohmann::json::object());
  return state.is_object() ? state.value("global_batch", std::int64_t{0}) : 0;
}

// --keep-global-batch: resuming at another data-parallel size (a job that lost a node), keep the
// checkpoint's global batch (data.batch_size x dp x optim.grad_accumulation) by changing the
// accumulation, or else the per-rank batch, so the run continues with the same optimisation.
// Collective over the world: rank 0 reads the manifest and broadcasts what it found.
void keep_global_batch(CommandContext& ctx, Config& config, const std::string& default_dir,
                       int model_ranks, const TrainOptions& opt) {
  // A deep copy: reading records defaults, which must stay out of the real config's tree.
  Config probe = Config::parse(config.dump(), config.origin());
  const train::TrainConfig cfg = train::TrainConfig::from(probe, default_dir);
  std::int64_t saved = 0;
  if (ctx.runtime.world_rank() == 0) saved = checkpoint_global_batch(cfg.run.dir, opt.resume);
  // Only rank 0 read it (the others hold 0): the maximum is rank 0's value.
  saved = comm::ControlPlane(ctx.runtime.world(), "world").reduce(saved, comm::ReduceOp::kMax);
  if (saved <= 0) return;
  const std::int64_t dp = ctx.runtime.world_size() / model_ranks;  // tp x pp ranks per replica
  const std::int64_t batch = cfg.data.batch_size;
  const std::int64_t now = batch * dp * cfg.optim.grad_accumulation;
  if (now == saved) return;
  if (saved % (batch * dp) == 0) {
    const std::int64_t accumulation = saved / (batch * dp);
    config.set(str("optim.grad_accumulation=", accumulation));
    log::info(str("--keep-global-batch: optim.grad_accumulation = ", accumulation,
                  ", so the global batch stays the checkpoint's ", saved, " (data.batch_size ",
                  batch, " x dp ", dp, " x ", accumulation, "; it would be ", now, ")"));
  } else if (saved % dp == 0) {
    config.set(str("data.batch_size=", saved / dp));
    config.set("optim.grad_accumulation=1");
    log::info(str("--keep-global-batch: data.batch_size = ", saved / dp,
                  " and optim.grad_accumulation = 1, so the global batch stays the checkpoint's ",
                  saved, " at dp ", dp, " (it would be ", now, ")"));
  } else {
    throw ConfigError(str("--keep-global-batch: the checkpoint's global batch ", saved,
                          " cannot be split over dp = ", dp,
                          " data-parallel ranks; launch a number of ranks whose dp divides ", saved,
                          ", or resume without --keep-global-batch (global batch ", now, ")"));
  }
}

int run_train(CommandContext& ctx, const TrainOptions& opt) {
  // Config, overrides and the grid shape are checked on every rank, then agreed on.
  RunConfig run = load_run_config(ctx, opt.config, opt.overrides);
  Config& config = run.config;
  const int tp = run.parallel.tp;
  const int pp = run.parallel.pp;
  const std::string default_dir = "runs/" + std::filesystem::path(opt.config).stem().string();
  const bool rank0 = ctx.runtime.world_rank() == 0;
  // The outcome of this start only: the previous start's file goes (a job script reads it).
  if (!opt.outcome_file.empty()) runtime::set_outcome_file(opt.outcome_file, rank0);
  if (opt.keep_global_batch) keep_global_batch(ctx, config, default_dir, tp * pp, opt);
  Session session = make_session(ctx, tp, pp);
  train::Trainer trainer(config, default_dir, environment(ctx, session), opt.resume);
  if (opt.outcome_file.empty())
    runtime::set_outcome_file(trainer.config().run.dir + "/outcome.json", rank0);
  train::TrainOutcome outcome = trainer.run();
  if (rank0) runtime::write_outcome(outcome.exit_code, outcome.reason, 0);
  session.control.world->barrier();
  return outcome.exit_code;
}

const CommandRegistration train_command = command<TrainOptions>(
    "train",
    "Train a model from a YAML config (data, tensor and pipeline parallel; sharded data "
    "parallelism)",
    [](CLI::App& app, TrainOptions& opt) {
      app.add_option("-c,--config", opt.config,
                     "Run configuration (YAML), e.g. configs/fmnist-mlp.yaml")
          ->required()
          ->check(CLI::ExistingFile);
      app.add_option("--set", opt.overrides,
                     "Override a config key: --set optim.lr=3e-4 (repeatable)");
      app.add_option("--resume", opt.resume,
                     "auto (latest verified checkpoint of run.dir, if any), none, or a checkpoint "
                     "directory");
      app.add_flag("--keep-global-batch", opt.keep_global_batch,
                   "Resuming at another data-parallel size (e.g. after losing a node), keep the "
                   "checkpoint's global batch: set optim.grad_accumulation (or else "
                   "data.batch_size) to make up for the ranks gained or lost");
      app.add_option(
          "--outcome-file", opt.outcome_file,
          "Where to write how the job ended, one JSON line: exit_code, reason, step "
          "(default run.dir/outcome.json; a caller of mpirun reads the exit code there)");
    },
    run_train);

}  // namespace
}  // namespace hpctrain::cli
