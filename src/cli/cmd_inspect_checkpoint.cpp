// hpctrain inspect checkpoint PATH: what a checkpoint holds (manifest, files, tensors and how they
// were sharded) and whether it verifies, exactly as a resume would check it. PATH is a step_<N>
// directory, or a run directory (or its checkpoints/) to list every checkpoint and describe the
// one `latest` names. Exit code 4 when the described checkpoint does not verify.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "command.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/resume_checks.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

struct InspectCheckpointArgs {
  std::string path;
  bool verify = true;
};

std::string shape_text(const nlohmann::json& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i].get<std::int64_t>());
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

// The run directory PATH belongs to when it is one (or its checkpoints/ directory).
std::optional<std::string> run_dir_of(const std::string& path) {
  if (fs::is_directory(path + "/checkpoints")) return path;
  if (fs::path(path).filename() == "checkpoints" ||
      fs::exists(path + "/" + checkpoint::kLatestFile))
    return fs::path(path).parent_path().string();
  return std::nullopt;
}

void list_run(const std::string& run_dir, std::ostream& out) {
  const auto latest = checkpoint::read_latest(run_dir);
  out << "run " << run_dir << ": " << checkpoint::checkpoints_dir(run_dir) << "\n";
  out << "  latest -> " << (latest ? fs::path(*latest).filename().string() : "(none)") << "\n";
  for (const std::string& dir : checkpoint::list_checkpoints(run_dir)) {
    std::string line = "  " + fs::path(dir).filename().string();
    try {
      const nlohmann::json m = checkpoint::read_manifest(dir);
      std::uint64_t bytes = 0;
      for (const auto& [name, f] : m.at("files").items())
        bytes += f.at("bytes").get<std::uint64_t>();
      line += str("  step ", m.at("step").get<std::int64_t>(), ", ",
                  format_bytes(static_cast<double>(bytes)), ", dp=", m.at("grid").at("dp"),
                  m.at("grid").value("pp", 1) > 1 ? str(" x pp=", m.at("grid").at("pp")) : "",
                  " x tp=", m.at("grid").at("tp"));
      if (m.contains("metric") && m.at("metric").is_number()) {
        line += str(", ", m.value("metric_name", std::string("metric")), " ",
                    m.at("metric").get<double>());
      }
    } catch (const CheckpointError& e) {
      line += str("  unreadable manifest: ", e.what());
    }
    out << line << "\n";
  }
  out << "\n";
}

std::string describe(const std::string& dir, const nlohmann::json& m) {
  std::ostringstream out;
  out << "checkpoint " << dir << "\n";
  out << str("  step ", m.at("step").get<std::int64_t>(), ", epoch ",
             m.at("epoch").get<std::int64_t>(), ", consumed samples ",
             m.at("consumed_samples").get<std::int64_t>(), "\n");
  out << str("  saved by hpctrain ", m.value("hpctrain_version", std::string("?")), " (LibTorch ",
             m.value("torch_version", std::string("?")), ", HDF5 ",
             m.value("hdf5_version", std::string("?")), ") at ",
             m.value("created_at", std::string("?")), " on ", m.at("world_size").get<int>(),
             " ranks, dp=", m.at("grid").at("dp").get<int>(),
             m.at("grid").value("pp", 1) > 1 ? str(" x pp=", m.at("grid").at("pp").get<int>()) : "",
             " x tp=", m.at("grid").at("tp").get<int>(), "\n");
  out << "  config xxh3 " << m.value("config_xxh3", std::string("?"));
  if (m.contains("metric") && m.at("metric").is_number()) {
    out << ", " << m.value("metric_name", std::string("metric")) << " "
        << m.at("metric").get<double>();
  }
  out << "\n  trainer state " << m.value("trainer_state", nlohmann::json::object()).dump() << "\n";
  if (m.contains("rng") && m.at("rng").is_object()) {
    out << str("  rng: ", m.at("rng").at("ranks").get<int>(), " ranks x ",
               m.at("rng").at("bytes").get<std::int64_t>(), " bytes in rng.h5:/cpu\n");
  }
  out << "files\n";
  for (const auto& [name, f] : m.at("files").items()) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-24s %14llu B  xxh3 %s\n", name.c_str(),
                  static_cast<unsigned long long>(f.at("bytes").get<std::uint64_t>()),
                  f.at("xxh3").get<std::string>().c_str());
    out << line;
  }
  out << "tensors\n";
  for (const auto& [name, t] : m.at("tensors").items()) {
    const int split = t.at("split_dim").get<int>();
    const std::string sharding =
        split < 0 ? "replicated"
                  : str("split dim ", split, " (saved over tp=", t.value("saved_tp", 1), ")");
    char line[512];
    std::snprintf(line, sizeof line, "  %-44s %-9s %-16s %s\n", name.c_str(),
                  t.at("dtype").get<std::string>().c_str(), shape_text(t.at("shape")).c_str(),
                  sharding.c_str());
    out << line;
  }
  return out.str();
}

int run_inspect_checkpoint(CommandContext& ctx, const InspectCheckpointArgs& opt) {
  // Local work: rank 0 describes; other ranks (under mpirun) have nothing to do.
  if (ctx.runtime.world_rank() != 0) return 0;
  runtime::require_readable_directory(opt.path, runtime::FileKind::kCheckpoint, "checkpoint",
                                      "pass a step_<N> directory or a run directory");
  std::string dir = opt.path;
  if (const auto run_dir = run_dir_of(opt.path)) {
    list_run(*run_dir, std::cout);
    const auto latest = checkpoint::read_latest(*run_dir);
    const auto all = checkpoint::list_checkpoints(*run_dir);
    if (latest) {
      dir = *latest;
    } else if (!all.empty()) {
      dir = all.front();
    } else {
      throw CheckpointError(str("no checkpoint in ", checkpoint::checkpoints_dir(*run_dir)));
    }
  }
  const nlohmann::json manifest = checkpoint::read_manifest(dir);
  std::cout << describe(dir, manifest) << std::flush;
  // What a resume would refuse in the trainer state (no files read): reported with or without
  // --no-verify, with the same words as `train --resume`.
  std::vector<std::string> problems = train::resume_state_problems(manifest, {});
  if (opt.verify) {
    const checkpoint::Verification v = checkpoint::verify(dir);
    if (!v.ok) throw CheckpointError(str(dir, " does not verify: ", v.reason));
    // The stored config is part of the checkpoint: `eval` rebuilds the model from it.
    if (manifest.at("files").contains("config.yaml")) {
      std::ifstream in(dir + "/config.yaml");
      std::ostringstream text;
      text << in.rdbuf();
      eval::RunConfig::parse_stored(text.str(), dir + "/config.yaml", dir);
    }
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += (list.empty() ? "" : "; ") + p;
    throw CheckpointError(str(dir, " does not verify: manifest.json: ", list,
                              ": the manifest was edited or damaged after it was written (its "
                              "checksum was recomputed)"));
  }
  if (!opt.verify) return 0;
  std::cout << "verified: every file has its recorded size and xxh3 checksum, every tensor its "
               "recorded shape\n"
            << std::flush;
  return 0;
}

const CommandRegistration inspect_checkpoint_command = command<InspectCheckpointArgs>(
    "inspect checkpoint",
    "Describe and verify a checkpoint: manifest, files, tensors and how they were sharded",
    [](CLI::App& app, InspectCheckpointArgs& opt) {
      app.add_option("path", opt.path,
                     "A step_<N> checkpoint directory, or a run directory (lists its checkpoints "
                     "and describes the latest)")
          ->required();
      app.add_flag("!--no-verify", opt.verify, "Skip reading the files for their checksums");
    },
    run_inspect_checkpoint, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
