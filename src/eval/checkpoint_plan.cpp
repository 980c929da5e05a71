#include "checkpoint_plan.hpp"

#include <sys/stat.h>

#include <filesystem>

#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval::detail {

namespace fs = std::filesystem;

nlohmann::json CheckpointPlan::to_json() const {
  return {{"status", status},
          {"message", message},
          {"code", code},
          {"dir", dir},
          {"step", step},
          {"epoch", epoch},
          {"config_text", config_text},
          {"config_origin", config_origin},
          {"data_path", data_path},
          {"data_key", data_key},
          {"data_bytes", data_bytes},
          {"key", key.to_json()},
          {"result_file", result_file},
          {"compression", compression},
          {"baseline_dir", baseline_dir},
          {"baseline_note", baseline_note}};
}

CheckpointPlan CheckpointPlan::from_json(const nlohmann::json& j) {
  CheckpointPlan p;
  p.status = j.at("status").get<std::string>();
  p.message = j.at("message").get<std::string>();
  p.code = j.at("code").get<int>();
  p.dir = j.at("dir").get<std::string>();
  p.step = j.at("step").get<std::int64_t>();
  p.epoch = j.at("epoch").get<std::int64_t>();
  p.config_text = j.at("config_text").get<std::string>();
  p.config_origin = j.at("config_origin").get<std::string>();
  p.data_path = j.at("data_path").get<std::string>();
  p.data_key = j.at("data_key").get<std::string>();
  p.data_bytes = j.at("data_bytes").get<std::uint64_t>();
  const auto& k = j.at("key");
  p.key.step = k.at("step").get<std::int64_t>();
  p.key.checkpoint_xxh3 = k.at("checkpoint_xxh3").get<std::string>();
  p.key.split = k.at("split").get<std::string>();
  p.key.data_xxh3 = k.at("data_xxh3").get<std::string>();
  p.key.batch_size = k.at("batch_size").get<std::string>();
  p.key.max_samples = k.at("max_samples").get<std::int64_t>();
  p.key.precision = k.at("precision").get<std::string>();
  p.key.tag = k.at("tag").get<std::string>();
  p.result_file = j.at("result_file").get<std::string>();
  p.compression = j.at("compression");
  p.baseline_dir = j.at("baseline_dir").get<std::string>();
  p.baseline_note = j.at("baseline_note").get<std::string>();
  return p;
}

const Planner::Digest& Planner::digest(const std::string& path, const std::string& key) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw DataError(str(key, " = ", path, " does not exist or is not a file",
                        key == "--data" ? std::string(": check the path")
                                        : std::string(": run from the directory the training ran "
                                                      "in (relative paths), or pass --data FILE")));
  }
  const std::int64_t mtime_ns =
      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  auto it = digests_.find(path);
  if (it != digests_.end() && it->second.bytes == static_cast<std::uint64_t>(st.st_size) &&
      it->second.mtime_ns == mtime_ns) {
    return it->second;
  }
  Digest d;
  try {
    const checkpoint::FileDigest fd = checkpoint::digest_file(path, buffer_);
    d.bytes = fd.bytes;
    d.xxh3 = fd.xxh3;
  } catch (const Error& e) {
    throw DataError(str(key, " = ", path, ": cannot read it to checksum it (", e.what(), ")"));
  }
  d.mtime_ns = mtime_ns;
  return digests_[path] = d;
}

CheckpointPlan Planner::plan(const std::string& run_dir, const std::string& dir,
                             ResultStore& store) {
  CheckpointPlan p;
  p.dir = dir;
  if (!fs::is_directory(dir)) {
    p.status = "gone";
    p.message = str("checkpoint '", dir, "' does not exist");
    return p;
  }
  try {
    nlohmann::json manifest;
    try {
      manifest = checkpoint::read_manifest(dir);
    } catch (const CheckpointError& e) {
      p.status = fs::is_directory(dir) ? "bad" : "gone";
      p.message = e.what();
      return p;
    }
    p.step = manifest.at("step").get<std::int64_t>();
    const auto named = checkpoint::parse_step_dir_name(fs::path(dir).filename().string());
    if (named && *named != p.step) {
      p.status = "bad";
      p.message = str("checkpoint '", dir, "' is named after step ", *named,
                      " but its manifest is of step ", p.step, " (copied or renamed?)");
      return p;
    }
    p.epoch = manifest.value("epoch", std::int64_t{0});
    // The stored config is parsed only once it verifies: a damaged one (a stray byte, a split
    // pointed elsewhere, a FIFO in its place) is a damaged checkpoint, not a config error.
    if (manifest.at("files").contains("config.yaml")) {
      const std::string reason = checkpoint::verify_file(dir, manifest, "config.yaml");
      if (!reason.empty()) {
        p.status = "bad";
        p.message = str("checkpoint '", dir, "' does not verify: ", reason);
        return p;
      }
    }
    p.config_text = RunConfig::read_text(dir, run_dir, p.config_origin);
    RunConfig config(p.config_text, p.config_origin);
    EvalKey& key = p.key;
    key.step = p.step;
    key.checkpoint_xxh3 = manifest.value("manifest_xxh3", std::string());
    std::string tag;
    auto add_tag = [&tag](const std::string& part) { tag += (tag.empty() ? "" : "-") + part; };
    if (!options_.data.empty()) {
      p.data_path = options_.data;
      p.data_key = "--data";
      key.split = options_.split_given ? options_.split : "file";
    } else {
      p.data_path = config.split_path(options_.split);
      p.data_key = str("data.", options_.split, " (", p.config_origin, ")");
      key.split = options_.split;
    }
    const Digest& d = digest(p.data_path, p.data_key);
    p.data_bytes = d.bytes;
    key.data_xxh3 = d.xxh3;
    if (!options_.data.empty()) {
      add_tag(str(key.split == "file" ? fs::path(p.data_path).stem().string() : key.split, "-",
                  d.xxh3.substr(0, 8)));
    } else if (key.split != "val") {
      add_tag(key.split);
    }
    key.batch_size = options_.batch_size.empty() ? std::to_string(config.eval_batch_size())
                                                 : options_.batch_size;
    if (key.batch_size != std::to_string(config.eval_batch_size())) add_tag("bs" + key.batch_size);
    key.max_samples = options_.max_samples >= 0 ? options_.max_samples : config.eval_max_samples();
    if (key.max_samples != config.eval_max_samples()) add_tag(str("max", key.max_samples));
    key.precision = options_.precision.empty() ? config.precision() : options_.precision;
    if (key.precision != config.precision()) add_tag(key.precision);
    const nlohmann::json state = manifest.value("trainer_state", nlohmann::json::object());
    if (state.is_object() && state.contains("compression")) {
      p.compression = state.at("compression");
      if (options_.compression.any()) {
        throw ConfigError(str("checkpoint '", dir, "' is already compressed (",
                              p.compression.value("tag", std::string("?")),
                              ", by hpctrain compress): drop --quantize/--prune to evaluate it, "
                              "or compress the float32 checkpoint it came from (",
                              p.compression.value("source", std::string("?")), ")"));
      }
      const std::string source = p.compression.value("source", std::string());
      const checkpoint::Verification sv = checkpoint::verify(source);
      if (sv.ok) {
        p.baseline_dir = source;
      } else {
        p.baseline_note = str("the float32 checkpoint it came from (", source,
                              ") does not verify (", sv.reason, "): no float32 comparison");
      }
    } else if (options_.compression.any()) {
      options_.compression.validate();
      add_tag(options_.compression.tag());
      p.baseline_dir = dir;
    }
    key.tag = tag;
    if (!options_.force && store.has(key)) {
      p.status = "done";
      p.result_file = store.step_file(key);
      return p;
    }
    const checkpoint::Verification v = checkpoint::verify(dir);
    if (!v.ok) {
      p.status = fs::is_directory(dir) ? "bad" : "gone";
      p.message = str("checkpoint '", dir, "' does not verify: ", v.reason);
      return p;
    }
    p.status = "evaluate";
  } catch (const Error& e) {
    p.status = "error";
    p.message = e.what();
    p.code = e.exit_code();
  } catch (const std::exception& e) {
    // Only the manifest's fields are read here, and parse_manifest checked their types.
    p.status = "bad";
    p.message =
        str("checkpoint '", dir, "' does not verify: ", checkpoint::kManifestFile, ": ", e.what());
  }
  if (p.status == "error" || p.status == "bad") p.config_text.clear();
  return p;
}

}  // namespace hpctrain::eval::detail
