#include "hpctrain/eval/run_config.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

RunConfig::RunConfig(const std::string& text, const std::string& origin)
    : config_(Config::parse(text, origin)), origin_(origin) {
  auto data = config_.section("data");
  data_ = data::DataConfig::from(data);
  // data.test is not a training key; a config may still carry one for evaluation.
  if (config_.root()["data"] && config_.root()["data"]["test"]) {
    test_path_ = data.get<std::string>("test", "");
  }
  auto eval = config_.section("eval");
  eval_ = EvalConfig::from(eval);
  tasks_ = read_eval_tasks(eval);
  auto run = config_.section("run");
  precision_ = PrecisionConfig::from(run);
  {
    YAML::Emitter out;
    out << YAML::Flow << config_.root()["model"];
    model_text_ = out.c_str();
  }
  auto model = config_.section("model");
  model_ = model::ModelSpec::from(model);
}

std::string RunConfig::read_text(const std::string& checkpoint_dir, const std::string& run_dir,
                                 std::string& origin) {
  for (const std::string& path : {checkpoint_dir + "/config.yaml", run_dir + "/config.yaml"}) {
    // The checkpoint's own config is part of the checkpoint (exit 4); the run's is a config.
    const bool in_checkpoint = path.rfind(checkpoint_dir + "/", 0) == 0;
    if (!runtime::require_regular_file_if_present(
            path, in_checkpoint ? runtime::FileKind::kCheckpoint : runtime::FileKind::kConfig,
            "config file", "the model cannot be rebuilt from it"))
      continue;
    std::ifstream in(path);
    if (!in) continue;
    std::ostringstream text;
    text << in.rdbuf();
    origin = path;
    return text.str();
  }
  throw ConfigError(str("no config.yaml in the checkpoint '", checkpoint_dir, "' nor in the run '",
                        run_dir,
                        "': the model cannot be rebuilt; evaluate a checkpoint written by hpctrain "
                        "train, inside its run directory"));
}

RunConfig RunConfig::parse_stored(const std::string& text, const std::string& origin,
                                  const std::string& checkpoint_dir) {
  try {
    return RunConfig(text, origin);
  } catch (const ConfigError& e) {
    if (origin.rfind(checkpoint_dir + "/", 0) != 0) throw;
    throw CheckpointError(str("checkpoint '", checkpoint_dir,
                              "' does not verify: its config.yaml does not parse: ", e.what(),
                              ": the checkpoint was damaged or edited; use another checkpoint"));
  }
}

std::shared_ptr<model::Model> RunConfig::build_model(const model::ModelContext& ctx) {
  auto section = config_.section("model");
  return model::build_model(section, ctx);
}

std::vector<std::string> RunConfig::splits() const {
  std::vector<std::string> out;
  if (!data_.train.empty()) out.push_back("train");
  if (!data_.val.empty()) out.push_back("val");
  if (!test_path_.empty()) out.push_back("test");
  return out;
}

std::string RunConfig::split_path(const std::string& split) const {
  std::string path;
  if (split == "val") path = data_.val;
  if (split == "train") path = data_.train;
  if (split == "test") path = test_path_;
  if (!path.empty()) return path;
  std::string known;
  for (const auto& s : splits()) known += (known.empty() ? "" : ", ") + s;
  throw ConfigError(str("unknown split '", split, "': the run's config (", origin_, ") defines ",
                        known.empty() ? std::string("no data splits") : "the splits " + known,
                        " (data.<split>); choose one of them with --split, or pass a file with "
                        "--data FILE"));
}

}  // namespace hpctrain::eval
