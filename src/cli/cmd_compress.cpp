// hpctrain compress CHECKPOINT --out DIR [--quantize int8] [--prune S [--prune-scope S]]: a
// compressed copy of a checkpoint in the same directory format (docs/EVAL.md, "Compressed
// evaluation"): DIR becomes a run directory whose checkpoints/step_<N> holds the pruned float
// tensors (exact zeros), the int8 weights and per-output-channel scales of the quantized linear
// layers (int8.h5), and the record of what was done (manifest trainer_state.compression).
// `hpctrain eval --checkpoint DIR` evaluates it beside the float32 checkpoint it came from.

#include <filesystem>

#include "command.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/eval/compression.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

struct CompressArgs {
  std::string checkpoint;
  std::string out;
  eval::CompressionSpec spec;
  CLI::App* app = nullptr;  ///< the command's parser: which options were given
};

int run_compress(CommandContext& ctx, const CompressArgs& opt) {
  if (ctx.runtime.world_size() > 1) {
    throw ConfigError("hpctrain compress runs as one process: start it without mpirun/srun");
  }
  eval::CompressionSpec spec = opt.spec;
  if (opt.app->count("--prune") > 0 && spec.prune == 0) {
    throw ConfigError("--prune 0: the sparsity is in (0, 1), e.g. --prune 0.5");
  }
  spec.validate();
  if (!spec.any()) {
    throw ConfigError("nothing to do: give --quantize int8, --prune SPARSITY, or both");
  }
  if (opt.app->count("--prune-scope") > 0 && spec.prune == 0) {
    throw ConfigError("--prune-scope chooses how --prune spreads its zeros: add --prune SPARSITY");
  }
  const std::string dir =
      fs::absolute(checkpoint::checkpoint_dir_of(opt.checkpoint)).lexically_normal();
  const auto verification = checkpoint::verify(dir);
  if (!verification.ok) {
    throw CheckpointError(
        str(dir, " does not verify (", verification.reason, "): compress a complete checkpoint"));
  }
  const nlohmann::json manifest = checkpoint::read_manifest(dir);
  nlohmann::json state = manifest.value("trainer_state", nlohmann::json::object());
  if (state.is_object() && state.contains("compression")) {
    throw ConfigError(str(dir, " is already compressed (", state["compression"].value("tag", ""),
                          "): compress the float32 checkpoint it came from (",
                          state["compression"].value("source", std::string("?")), ")"));
  }
  const fs::path out = fs::absolute(opt.out);
  if (fs::exists(out / "checkpoints")) {
    throw ConfigError(str("--out ", out.string(),
                          " already holds checkpoints: choose a new directory (nothing is "
                          "overwritten)"));
  }

  const std::string run_dir = fs::path(dir).parent_path().parent_path().string();
  std::string origin;
  const std::string text = eval::RunConfig::read_text(dir, run_dir, origin);
  eval::RunConfig config = eval::RunConfig::parse_stored(text, origin, dir);
  torch::manual_seed(0);
  auto model = config.build_model(model::ModelContext{});
  auto records = eval::model_records(*model);
  checkpoint::load_local(dir, records);  // tensor-parallel shards gathered: tp = 1 here
  model->eval();
  eval::CompressedModel compressed = eval::compress_model(*model, spec);
  nlohmann::ordered_json report = compressed.report;
  report["tag"] = spec.tag();
  report["source"] = dir;
  report["source_manifest_xxh3"] = manifest.value("manifest_xxh3", std::string());
  report["source_world_size"] = manifest.value("world_size", std::int64_t{1});  // who trained it
  report["hpctrain_version"] = HPCTRAIN_VERSION;
  report["created_at"] = utc_timestamp();

  checkpoint::SaveContent content;
  content.step = manifest.at("step").get<std::int64_t>();
  content.epoch = manifest.value("epoch", std::int64_t{0});
  content.consumed_samples = manifest.value("consumed_samples", std::int64_t{0});
  if (!state.is_object()) state = nlohmann::json::object();
  state["compression"] = report;
  content.trainer_state = state;
  content.config_text = text;
  std::map<std::string, model::Int8Weight> slots;
  for (auto& r : eval::compressed_records(*model, report, slots)) {
    if (r.name.rfind("int8/", 0) == 0) continue;  // filled from `compressed.int8` below
    r.local = r.local.detach().contiguous();
    content.tensors.push_back(std::move(r));
  }
  for (const auto& [layer, w] : compressed.int8) {
    content.tensors.push_back(
        {"int8/" + layer + ".weight", w.values, model::ShardInfo{w.values.sizes().vec(), -1}});
    content.tensors.push_back({"int8/" + layer + ".weight_scale", w.scales,
                               model::ShardInfo{w.scales.sizes().vec(), -1}});
  }
  const std::string written = checkpoint::save_local(out.string(), std::move(content));

  std::string table =
      str("  ", "layer", std::string(14, ' '), "kind    weights     sparsity  int8");
  for (const auto& l : report["layers"]) {
    std::string name = l["layer"].get<std::string>();
    name.resize(std::max<std::size_t>(name.size(), 19), ' ');
    std::string kind = l["kind"].get<std::string>();
    kind.resize(8, ' ');
    std::string weights = std::to_string(l["weights"].get<std::int64_t>());
    weights.resize(std::max<std::size_t>(weights.size(), 12), ' ');
    char sparsity[32];
    std::snprintf(sparsity, sizeof sparsity, "%-9.4f", l["sparsity"].get<double>());
    table += str("\n  ", name, " ", kind, weights, sparsity, " ",
                 l["int8"].get<bool>() ? "yes" : "no (float32)");
  }
  log::info(str("compressed ", dir, " (", spec.tag(), ") into ", written, ":\n", table,
                "\n  model ", format_bytes(report["bytes_before"].get<double>()), " -> ",
                format_bytes(report["bytes_after"].get<double>()),
                report.contains("engine")
                    ? str("; int8 weights per output channel, activations quantized per batch at "
                          "run time on the ",
                          report["engine"].get<std::string>(), " engine; convolutions",
                          report.contains("kept_float32")
                              ? str(", ", report["kept_float32"].get<std::string>())
                              : std::string(),
                          " stay float32")
                    : std::string(),
                "\n  evaluate it beside float32: hpctrain eval --checkpoint ", out.string()));
  return 0;
}

const CommandRegistration compress_command = command<CompressArgs>(
    "compress", "Write a pruned and/or int8 copy of a checkpoint (same format, verifiable)",
    [](CLI::App& app, CompressArgs& opt) {
      opt.app = &app;
      app.add_option("checkpoint", opt.checkpoint,
                     "Checkpoint directory (step_<N>) or run directory (its latest checkpoint)")
          ->required();
      app.add_option("--out", opt.out,
                     "New run directory for the compressed checkpoint (DIR/checkpoints/step_<N>)")
          ->required();
      app.add_option("--quantize", opt.spec.quantize,
                     "int8: linear layers' weights in int8 per output channel (dynamic "
                     "quantization)");
      app.add_option("--prune", opt.spec.prune,
                     "Sparsity in (0, 1): zero that fraction of the weights, smallest magnitude "
                     "first (L1, unstructured)");
      app.add_option("--prune-scope", opt.spec.scope,
                     "global: one threshold over all prunable weights (default); layer: the same "
                     "sparsity in each layer");
    },
    run_compress, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
