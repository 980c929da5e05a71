// hpctrain train: data-parallel (and tensor-parallel) training from a YAML config.

#include <filesystem>

#include "command.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string resume = "auto";
};
TrainOptions g_train;

int run_train(CommandContext& ctx) {
  // Config, overrides and the grid shape are read and checked on every rank before any collective.
  Config config = Config::load(g_train.config);
  for (const auto& assignment : g_train.overrides) config.set(assignment);
  const int tp = config.section("parallel").get<int>("tp", 1);
  if (tp < 1) throw ConfigError(str("parallel.tp = ", tp, ": must be a positive integer"));
  Session session = make_session(ctx, tp);
  const std::string default_dir = "runs/" + std::filesystem::path(g_train.config).stem().string();
  train::Trainer trainer(config, default_dir, environment(ctx, session), g_train.resume);
  train::TrainOutcome outcome = trainer.run();
  session.comms.world->barrier();
  return outcome.exit_code;
}

CommandRegistration reg(
    "train", "Train a model from a YAML config (data and tensor parallel)",
    [](CLI::App& app) {
      app.add_option("-c,--config", g_train.config,
                     "Run configuration (YAML), e.g. configs/fmnist-mlp.yaml")
          ->required()
          ->check(CLI::ExistingFile);
      app.add_option("--set", g_train.overrides,
                     "Override a config key: --set optim.lr=3e-4 (repeatable)");
      app.add_option("--resume", g_train.resume,
                     "auto (latest verified checkpoint of run.dir, if any), none, or a checkpoint "
                     "directory");
    },
    run_train);

}  // namespace
}  // namespace hpctrain::cli
