// hpctrain export CHECKPOINT --format torchscript --out model.pt: the trained model of a
// TorchScript run as a TorchScript file of its own (the run's module, same architecture, with the
// checkpoint's parameters and buffers, in evaluation mode) that torch.jit.load serves in Python or
// C++. CHECKPOINT is a step_<N> directory or a run directory (its `latest`).

#include <filesystem>

#include "command.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/torchscript_model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

struct ExportArgs {
  std::string checkpoint;
  std::string format = "torchscript";
  std::string out;
};
ExportArgs g_export;

// A step_<N> directory as given, or the one a run directory's (or its checkpoints/) `latest` names.
std::string checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/manifest.json")) return path;
  for (const std::string& run : {path, fs::path(path).parent_path().string()}) {
    if (auto latest = checkpoint::read_latest(run)) return *latest;
  }
  throw CheckpointError(str(path,
                            " is neither a checkpoint (no manifest.json) nor a run directory "
                            "with a checkpoints/latest pointer: pass a step_<N> directory"));
}

int run_export(CommandContext& ctx) {
  if (ctx.runtime.world_size() > 1) {
    throw ConfigError("hpctrain export runs as one process: start it without mpirun/srun");
  }
  const std::string dir = checkpoint_dir(g_export.checkpoint);
  const auto verification = checkpoint::verify(dir);
  if (!verification.ok) {
    throw CheckpointError(
        str(dir, " does not verify (", verification.reason, "): export a complete checkpoint"));
  }
  const std::string run_dir = fs::path(dir).parent_path().parent_path().string();
  std::string origin;
  const std::string text = eval::RunConfig::read_text(dir, run_dir, origin);
  eval::RunConfig config(text, origin);
  if (config.model_name() != "torchscript") {
    throw ConfigError(str(dir, " is a checkpoint of a ", config.model_name(), " model (", origin,
                          "): --format torchscript exports TorchScript runs (model.name: "
                          "torchscript); read other checkpoints with scripts/load_checkpoint.py"));
  }
  auto model = config.build_model(model::ModelContext{});
  auto* scripted = dynamic_cast<model::TorchScriptModel*>(model.get());
  if (!scripted) throw Error("the torchscript model is not a TorchScriptModel (internal error)");
  auto records = eval::model_records(*model);
  checkpoint::Loaded loaded = checkpoint::load_local(dir, records);
  model->eval();

  // Written beside the target and renamed: a reader never sees half a file.
  const fs::path out = fs::absolute(g_export.out);
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const std::string tmp = out.string() + ".tmp";
  try {
    scripted->module().save(tmp);
  } catch (const c10::Error& e) {
    fs::remove(tmp);
    throw ConfigError(
        str("cannot write ", out.string(), ": ", e.what_without_backtrace(), ": check --out"));
  }
  fs::rename(tmp, out);
  log::info(str("wrote ", out.string(), ": the module of ", origin, " with the ", records.size(),
                " tensors of ", dir, " (step ", loaded.manifest.value("step", std::int64_t{0}),
                "), in evaluation mode; load it with torch.jit.load"));
  return 0;
}

CommandRegistration reg(
    "export", "Write a TorchScript run's trained model as a TorchScript file",
    [](CLI::App& app) {
      app.add_option("checkpoint", g_export.checkpoint,
                     "Checkpoint directory (step_<N>) or run directory (its latest checkpoint)")
          ->required();
      app.add_option("--format", g_export.format, "Output format: torchscript")
          ->check(CLI::IsMember({"torchscript"}));
      app.add_option("--out", g_export.out, "File to write, e.g. model.pt")->required();
    },
    run_export);

}  // namespace
}  // namespace hpctrain::cli
