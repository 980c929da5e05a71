// hpctrain export CHECKPOINT --format pytorch|torchscript|onnx|hf --out FILE: a checkpoint's
// trained model for other tools (docs/MODELS.md, "Export").
//   pytorch      the state_dict in PyTorch's own file format (torch::pickle_save), so that
//                torch.load(FILE) in Python returns the name -> tensor dict
//   torchscript  a TorchScript run: its own module with the checkpoint's weights; a built-in mlp
//                or cnn: scripts/export_model.py rebuilds it in PyTorch and scripts it
//   onnx         scripts/export_model.py: torch.onnx.export of that module, onnx.checker-checked
//   hf           a Hugging Face model folder (export_safetensors.hpp): a llama under its
//                architecture's names, a gpt under GPT-2's, with config.json, sharded past
//                --max-shard-size; safetensors is the same
// CHECKPOINT is a step_<N> directory or a run directory (its `latest`).

#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "command.hpp"
#include "export_safetensors.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/model_family.hpp"
#include "hpctrain/model/torchscript_model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

extern "C" char** environ;

struct ExportArgs {
  std::string checkpoint;
  std::string format = "torchscript";
  std::string out;
  std::string max_shard_size = "5GB";
  std::int64_t seq_len = 0;  // gpt: tokens per sequence of the export (0: model.seq_len)
  CLI::App* app = nullptr;   ///< the command's parser: which options were given
};

// The interpreter and the scripts/ directory: HPCTRAIN_PYTHON and HPCTRAIN_SCRIPTS_DIR when set
// (an installed hpctrain without its source tree), else Debian's python3 and this source tree's.
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

// Runs scripts/export_model.py without a shell (no quoting of the model text) and returns its
// exit status; its messages go to this process's stderr.
int run_export_script(const std::string& model_text, const std::string& state_file,
                      const std::string& format, const std::string& out, std::int64_t seq_len,
                      const std::string& input_shape) {
  const std::string python = env_or("HPCTRAIN_PYTHON", "/usr/bin/python3");
  const std::string script =
      env_or("HPCTRAIN_SCRIPTS_DIR", std::string(HPCTRAIN_SOURCE_DIR) + "/scripts") +
      "/export_model.py";
  if (!fs::exists(script)) {
    throw ConfigError(str(script, " not found: --format ", format,
                          " needs hpctrain's scripts/ (set HPCTRAIN_SCRIPTS_DIR)"));
  }
  std::vector<std::string> args{python,     script,     "--model", model_text, "--state",
                                state_file, "--format", format,    "--out",    out};
  if (seq_len > 0) {
    args.push_back("--seq-len");
    args.push_back(std::to_string(seq_len));
  }
  if (!input_shape.empty()) {
    args.push_back("--input-shape");
    args.push_back(input_shape);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, python.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    throw ConfigError(
        str("cannot start ", python, ": install python3-torch (or set HPCTRAIN_PYTHON)"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// "1,28,28": one sample's shape of the run's training data (else validation data), for the ONNX
// export of a TorchScript module. Throws ConfigError when neither file can be opened.
std::string sample_shape_of(const eval::RunConfig& config, const std::string& dir) {
  std::string why;
  for (const std::string& path : {config.data().train, config.data().val}) {
    if (path.empty()) continue;
    try {
      const auto dataset = data::Dataset::open(path);
      std::string shape;
      for (auto d : dataset->info().sample_shape) shape += (shape.empty() ? "" : ",") + str(d);
      return shape;
    } catch (const Error& e) {
      why = e.what();
    }
  }
  throw ConfigError(str("--format onnx of a TorchScript module traces it on one sample of the ",
                        "run's data, but neither data.train nor data.val of ", dir, " opens",
                        why.empty() ? std::string() : str(" (", why, ")"),
                        ": export where the data is"));
}

// A decoder that scripts/export_model.py rebuilds (the gpt): its inputs are tokens, --seq-len long.
bool rebuilt_decoder(const eval::RunConfig& config) {
  const model::ModelFamily* family = model::find_model_family(config.model().name);
  return family != nullptr && family->decoder && family->rebuilt_by_export;
}

// A gpt's context, model.seq_len (GptOptions' default when the section leaves it out).
std::int64_t gpt_context(const eval::RunConfig& config) {
  return config.model().seq_len > 0 ? config.model().seq_len : model::GptOptions{}.seq_len;
}

// What the checkpoint and the options ask for is refused before anything is built: a model the
// format cannot rebuild, a --seq-len that does not apply or does not fit, an int8 checkpoint.
void check_export_request(const eval::RunConfig& config, const std::string& dir,
                          const std::string& origin, const ExportArgs& opt) {
  const std::string& format = opt.format;
  const bool torchscript_run = config.model().name == "torchscript";
  const bool gpt = rebuilt_decoder(config);
  const bool state_only = format == "pytorch" || format == "safetensors" || format == "hf";
  const model::ModelFamily* family = model::find_model_family(config.model().name);
  if (!state_only && !torchscript_run && (family == nullptr || !family->rebuilt_by_export)) {
    std::vector<std::string> rebuilt;
    for (const std::string& name : model::model_names()) {
      if (model::find_model_family(name)->rebuilt_by_export) rebuilt.push_back(name);
    }
    throw ConfigError(str(dir, " is a checkpoint of a ", config.model().name, " model (", origin,
                          "): --format ", format, " rebuilds the built-in ", and_list(rebuilt),
                          " models and TorchScript runs in PyTorch; export this one with "
                          "--format pytorch (its state_dict)"));
  }
  if (opt.app->count("--seq-len") > 0) {
    if (!gpt || state_only) {
      throw ConfigError(
          str("--seq-len sets the token length of a gpt's torchscript or onnx "
              "export; ",
              gpt ? str("a state_dict (--format ", format, ") has none")
                  : str("a ", config.model().name, " has fixed-size inputs"),
              ": leave it out"));
    }
    const std::int64_t context = gpt_context(config);
    if (opt.seq_len < 1 || opt.seq_len > context) {
      throw ConfigError(str("--seq-len ", opt.seq_len, ": this gpt reads at most model.seq_len = ",
                            context, " tokens (", origin,
                            "; its position table has that many rows): export with a --seq-len "
                            "from 1 to ",
                            context, "; nothing written"));
    }
  }
  // The manifest held by name: a reference into read_manifest's temporary would dangle.
  const nlohmann::json manifest = checkpoint::read_manifest(dir);
  if (manifest.value("trainer_state", nlohmann::json::object()).contains("compression")) {
    const nlohmann::json& c = manifest["trainer_state"]["compression"];
    if (c.value("quantize", std::string()) == "int8") {
      throw ConfigError(str(dir,
                            " is an int8 checkpoint (hpctrain compress --quantize int8): "
                            "export the float32 checkpoint it came from (",
                            c.value("source", std::string("?")), ")"));
    }
  }
}

// The state_dict: parameters then buffers, under the model's names, as torch.load returns it,
// written to `path`. Returns its tensor count.
std::size_t write_state_dict(model::Model& model, const std::string& path) {
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& item : model.named_parameters(true)) {
    state.insert(item.key(), item.value().detach().contiguous());
  }
  for (const auto& item : model.named_buffers(true)) {
    state.insert(item.key(), item.value().detach().contiguous());
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(state));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    fs::remove(path);
    throw ConfigError(str("cannot write ", path, ": check --out and free space"));
  }
  return state.size();
}

// --format torchscript or onnx of a built-in model or TorchScript run: scripts/export_model.py
// rebuilds it in PyTorch from the state_dict in `state_file` and writes `out`.
void export_through_python(const eval::RunConfig& config, const std::string& dir,
                           const std::string& state_file, const fs::path& out, std::int64_t step,
                           const ExportArgs& opt) {
  const std::string& format = opt.format;
  const bool torchscript_run = config.model().name == "torchscript";
  const bool gpt = rebuilt_decoder(config);
  // A TorchScript module's ONNX graph is traced on one sample of the run's data (its shape).
  const std::string input_shape =
      torchscript_run && format == "onnx" ? sample_shape_of(config, dir) : std::string();
  const int code = run_export_script(config.model_text(), state_file, format, out.string(),
                                     opt.seq_len, input_shape);
  fs::remove(state_file);
  if (code != 0) {
    fs::remove(out.string() + ".tmp");
    if (code == 2) {
      throw ConfigError(str("scripts/export_model.py refused ", dir, " (above): nothing written"));
    }
    throw Error(str("scripts/export_model.py failed with status ", code, " for ", dir,
                    " (above): nothing written; it needs python3-torch and python3-yaml",
                    format == "onnx" ? " and python3-onnx" : ""));
  }
  log::info(
      str("wrote ", out.string(), ": the ", config.model().name, " of ", dir, " (step ", step, ") ",
          format == "onnx"
              ? str("as ONNX (torch.onnx.export, opset 13, batch dimension dynamic",
                    gpt ? str("; int64 tokens [batch, ",
                              opt.seq_len > 0 ? opt.seq_len : gpt_context(config), "] -> logits")
                        : std::string(),
                    torchscript_run ? str("; traced on inputs [batch, ", input_shape, "]")
                                    : std::string(),
                    "), checked with onnx.checker; run it with ONNX Runtime, e.g. "
                    "scripts/onnx_runtime.js (docs/EVAL.md)")
              : str("as a TorchScript module in evaluation mode",
                    gpt ? " (traced through scripts/gpt_torch_reference.py's Gpt; batch and "
                          "length up to model.seq_len free)"
                        : "",
                    "; load it with torch.jit.load")));
}

int run_export(CommandContext& ctx, const ExportArgs& opt) {
  if (ctx.runtime.world_size() > 1) {
    throw ConfigError("hpctrain export runs as one process: start it without mpirun/srun");
  }
  const std::string dir = checkpoint::checkpoint_dir_of(opt.checkpoint);
  const auto verification = checkpoint::verify(dir);
  if (!verification.ok) {
    throw CheckpointError(
        str(dir, " does not verify (", verification.reason, "): export a complete checkpoint"));
  }
  const std::string run_dir = fs::path(dir).parent_path().parent_path().string();
  std::string origin;
  const std::string text = eval::RunConfig::read_text(dir, run_dir, origin);
  eval::RunConfig config = eval::RunConfig::parse_stored(text, origin, dir);
  const std::string& format = opt.format;
  const bool torchscript_run = config.model().name == "torchscript";
  check_export_request(config, dir, origin, opt);
  auto model = config.build_model(model::ModelContext{});
  auto records = eval::model_records(*model);
  checkpoint::Loaded loaded = checkpoint::load_local(dir, records);
  model->eval();
  const std::int64_t step = loaded.manifest.value("step", std::int64_t{0});
  if (format == "safetensors" || format == "hf") {
    const auto max_shard =
        static_cast<std::int64_t>(parse_bytes(opt.max_shard_size, "--max-shard-size"));
    if (max_shard < 1) throw ConfigError("--max-shard-size must be positive (default 5GB)");
    log::info(str("wrote ", export_safetensors(*model, opt.out, dir, step, max_shard), " from ",
                  dir, " (step ", step, ")"));
    return 0;
  }

  // Written beside the target and renamed: a reader never sees half a file.
  const fs::path out = fs::absolute(opt.out);
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  const std::string tmp = out.string() + ".tmp";
  if (format == "torchscript" && torchscript_run) {
    auto* scripted = dynamic_cast<model::TorchScriptModel*>(model.get());
    if (!scripted) throw Error("the torchscript model is not a TorchScriptModel (internal error)");
    try {
      scripted->module().save(tmp);
    } catch (const c10::Error& e) {
      fs::remove(tmp);
      throw ConfigError(
          str("cannot write ", out.string(), ": ", e.what_without_backtrace(), ": check --out"));
    }
    fs::rename(tmp, out);
    log::info(str("wrote ", out.string(), ": the module of ", origin, " with the ", records.size(),
                  " tensors of ", dir, " (step ", step,
                  "), in evaluation mode; load it with torch.jit.load"));
    return 0;
  }

  const std::string state_file = format == "pytorch" ? tmp : out.string() + ".state.tmp";
  const std::size_t tensors = write_state_dict(*model, state_file);
  if (format == "pytorch") {
    fs::rename(tmp, out);
    log::info(str("wrote ", out.string(), ": the state_dict of ", dir, " (step ", step, ", ",
                  tensors, " tensors) in PyTorch's format; torch.load(\"", out.string(),
                  "\") returns it"));
    return 0;
  }
  export_through_python(config, dir, state_file, out, step, opt);
  return 0;
}

const CommandRegistration export_command = command<ExportArgs>(
    "export",
    "Write a checkpoint's model for other tools: PyTorch state_dict, TorchScript, ONNX, "
    "safetensors",
    [](CLI::App& app, ExportArgs& opt) {
      opt.app = &app;
      app.add_option("checkpoint", opt.checkpoint,
                     "Checkpoint directory (step_<N>) or run directory (its latest checkpoint)")
          ->required();
      app.add_option("--format", opt.format,
                     "pytorch (state_dict for torch.load), torchscript (torch.jit.load), onnx, "
                     "or hf (a Hugging Face model folder: a llama under its architecture's names, "
                     "a gpt under GPT-2's, with config.json; safetensors is the same) "
                     "(default torchscript)")
          ->check(CLI::IsMember({"pytorch", "torchscript", "onnx", "safetensors", "hf"}));
      app.add_option("--max-shard-size", opt.max_shard_size,
                     "hf, safetensors: largest weights file; larger models are cut into shards "
                     "with model.safetensors.index.json (default 5GB = 5e9 bytes)");
      app.add_option("--out", opt.out, "File to write, e.g. model.pt (safetensors: a folder)")
          ->required();
      app.add_option("--seq-len", opt.seq_len,
                     "gpt, torchscript or onnx: tokens per sequence of the export, 1 to "
                     "model.seq_len (default model.seq_len; the ONNX input is [batch, this])");
    },
    run_export, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
