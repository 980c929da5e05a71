#include "checkpoint_triage.hpp"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval::detail {

namespace fs = std::filesystem;

nlohmann::json CheckpointDecision::to_json() const {
  return {{"verdict", static_cast<int>(verdict)},
          {"precision", static_cast<int>(precision)},
          {"message", message},
          {"code", code},
          {"dir", dir},
          {"step", step},
          {"epoch", epoch},
          {"consumed_samples", consumed_samples},
          {"training_cost", training_cost},
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

CheckpointDecision CheckpointDecision::from_json(const nlohmann::json& j) {
  CheckpointDecision p;
  p.verdict = static_cast<Verdict>(j.at("verdict").get<int>());
  p.precision = static_cast<Precision>(j.at("precision").get<int>());
  p.message = j.at("message").get<std::string>();
  p.code = j.at("code").get<int>();
  p.dir = j.at("dir").get<std::string>();
  p.step = j.at("step").get<std::int64_t>();
  p.epoch = j.at("epoch").get<std::int64_t>();
  p.consumed_samples = j.at("consumed_samples").get<std::int64_t>();
  p.training_cost = j.at("training_cost");
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

const CheckpointTriage::Digest& CheckpointTriage::digest(const std::string& path,
                                                         const std::string& key) {
  struct stat st {};
  if (runtime::path_type(path) != runtime::PathType::kRegular || ::stat(path.c_str(), &st) != 0) {
    throw DataError(str(key, " = ", path, " does not exist or is not a regular file",
                        key == "--data" || key.rfind("--task", 0) == 0
                            ? std::string(": check the path")
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

namespace {

// A tag joins its parts with '-'.
void add_tag(std::string& tag, const std::string& part) {
  tag += (tag.empty() ? "" : "-") + part;
}

}  // namespace

std::string CheckpointTriage::evaluation_key(const RunConfig& config, CheckpointDecision& p) {
  EvalKey& key = p.key;
  std::string tag;
  if (!options_.choice_file.empty()) {
    p.data_path = options_.choice_file;
    p.data_key = "--task multiple-choice";
    key.split = "multiple-choice";
  } else if (!options_.data.empty()) {
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
  if (!options_.choice_file.empty()) {
    add_tag(tag, str("mc-", fs::path(p.data_path).stem().string(), "-", d.xxh3.substr(0, 8)));
  } else if (!options_.data.empty()) {
    add_tag(tag, str(key.split == "file" ? fs::path(p.data_path).stem().string() : key.split, "-",
                     d.xxh3.substr(0, 8)));
  } else if (key.split != "val") {
    add_tag(tag, key.split);
  }
  // Multiple choice counts examples per batch (8 unless --batch-size); no tag for it.
  const std::string default_batch =
      options_.choice_file.empty() ? std::to_string(config.eval_batch_size()) : std::string("8");
  key.batch_size = options_.batch_size.empty() ? default_batch : options_.batch_size;
  if (key.batch_size != default_batch) add_tag(tag, "bs" + key.batch_size);
  const std::int64_t default_max = options_.choice_file.empty() ? config.eval_max_samples() : 0;
  key.max_samples = options_.max_samples >= 0 ? options_.max_samples : default_max;
  if (key.max_samples != default_max) add_tag(tag, str("max", key.max_samples));
  p.precision = options_.precision.value_or(config.precision());
  key.precision = precision_name(p.precision);
  if (p.precision != config.precision()) add_tag(tag, key.precision);
  return tag;
}

void CheckpointTriage::compression_of(const nlohmann::json& manifest, const std::string& dir,
                                      CheckpointDecision& p, std::string& tag) {
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
      p.baseline_note = str("the float32 checkpoint it came from (", source, ") does not verify (",
                            sv.reason, "): no float32 comparison");
    }
  } else if (options_.compression.any()) {
    options_.compression.validate();
    add_tag(tag, options_.compression.tag());
    p.baseline_dir = dir;
  }
}

CheckpointDecision CheckpointTriage::decide(const std::string& run_dir, const std::string& dir,
                                            ResultStore& store) {
  CheckpointDecision p;
  p.dir = dir;
  if (!fs::is_directory(dir)) {
    p.verdict = Verdict::kGone;
    p.message = str("checkpoint '", dir, "' does not exist");
    return p;
  }
  try {
    nlohmann::json manifest;
    try {
      manifest = checkpoint::read_manifest(dir);
    } catch (const CheckpointError& e) {
      p.verdict = fs::is_directory(dir) ? Verdict::kBad : Verdict::kGone;
      p.message = e.what();
      return p;
    }
    p.step = manifest.at("step").get<std::int64_t>();
    const auto named = checkpoint::parse_step_dir_name(fs::path(dir).filename().string());
    if (named && *named != p.step) {
      p.verdict = Verdict::kBad;
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
        p.verdict = Verdict::kBad;
        p.message = str("checkpoint '", dir, "' does not verify: ", reason);
        return p;
      }
    }
    p.config_text = RunConfig::read_text(dir, run_dir, p.config_origin);
    std::optional<RunConfig> parsed;
    try {
      parsed.emplace(RunConfig::parse_stored(p.config_text, p.config_origin, dir));
    } catch (const CheckpointError& e) {
      p.verdict = Verdict::kBad;
      p.message = e.what();
      p.config_text.clear();
      return p;
    }
    const RunConfig& config = *parsed;
    EvalKey& key = p.key;
    key.step = p.step;
    key.checkpoint_xxh3 = manifest.value("manifest_xxh3", std::string());
    std::string tag = evaluation_key(config, p);
    compression_of(manifest, dir, p, tag);
    key.tag = tag;
    if (!options_.force && store.has(key)) {
      p.verdict = Verdict::kDone;
      p.result_file = store.step_file(key);
      return p;
    }
    const checkpoint::Verification v = checkpoint::verify(dir);
    if (!v.ok) {
      p.verdict = fs::is_directory(dir) ? Verdict::kBad : Verdict::kGone;
      p.message = str("checkpoint '", dir, "' does not verify: ", v.reason);
      return p;
    }
    p.verdict = Verdict::kEvaluate;
    p.consumed_samples = manifest.value("consumed_samples", std::int64_t{0});
    // A compressed checkpoint cost what its float32 source cost.
    std::string trained_in = run_dir;
    std::int64_t trained_on = manifest.value("world_size", std::int64_t{1});
    if (!p.compression.is_null()) {
      trained_in = fs::path(p.compression.value("source", std::string()))
                       .parent_path()
                       .parent_path()
                       .string();
      trained_on = p.compression.value("source_world_size", trained_on);
    }
    p.training_cost = training_cost(trained_in, p.step, trained_on);
  } catch (const Error& e) {
    p.verdict = Verdict::kError;
    p.message = e.what();
    p.code = e.exit_code();
  } catch (const std::exception& e) {
    // Only the manifest's fields are read here, and parse_manifest checked their types.
    p.verdict = Verdict::kBad;
    p.message =
        str("checkpoint '", dir, "' does not verify: ", checkpoint::kManifestFile, ": ", e.what());
  }
  if (p.verdict == Verdict::kError || p.verdict == Verdict::kBad) p.config_text.clear();
  return p;
}

}  // namespace hpctrain::eval::detail

namespace hpctrain::eval::detail {

nlohmann::json training_cost(const std::string& run_dir, std::int64_t step,
                             std::int64_t world_size) {
  // Only a regular file (a FIFO would block the open); the cost is optional, so anything else is
  // skipped.
  if (runtime::path_type(run_dir + "/metrics.jsonl") != runtime::PathType::kRegular) return nullptr;
  std::ifstream in(run_dir + "/metrics.jsonl");
  if (!in) return nullptr;
  double wall = 0;
  std::int64_t previous = 0, timed = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"type\":\"train\"") == std::string::npos) continue;
    const nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.contains("step") || !r.contains("step_time")) continue;
    const std::int64_t s = r["step"].get<std::int64_t>();
    if (s > step || s <= previous) continue;
    wall += r["step_time"].get<double>() * static_cast<double>(s - previous);
    timed += s - previous;
    previous = s;
  }
  if (timed == 0) return nullptr;
  // Steps after the last logged interval (the checkpoint's step is not a logging step) are
  // counted at the mean rate of the timed ones.
  if (previous < step) wall *= static_cast<double>(step) / static_cast<double>(timed);
  return {{"rank_seconds", wall * static_cast<double>(world_size)},
          {"wall_seconds", wall},
          {"world_size", world_size},
          {"steps_timed", timed},
          {"source", run_dir + "/metrics.jsonl (train records: step_time x steps)"}};
}

nlohmann::ordered_json cost_record(const nlohmann::json& training, double forward_flops,
                                   std::int64_t consumed_samples, double eval_seconds,
                                   int world_size, std::int64_t eval_samples) {
  const double train_flops = 3.0 * forward_flops * static_cast<double>(consumed_samples);
  const double eval_flops = forward_flops * static_cast<double>(eval_samples);
  const double eval_rank_seconds = eval_seconds * world_size;
  nlohmann::ordered_json train{{"flops", train_flops}, {"samples", consumed_samples}};
  nlohmann::ordered_json j;
  if (!training.is_null()) {
    const double rs = training.at("rank_seconds").get<double>();
    train["rank_seconds"] = rs;
    train["device_hours"] = rs / 3600;
    train["wall_seconds"] = training.at("wall_seconds");
    train["world_size"] = training.at("world_size");
    train["source"] = training.at("source");
  }
  j["training"] = train;
  j["evaluation"] = {{"flops", eval_flops},
                     {"samples", eval_samples},
                     {"rank_seconds", eval_rank_seconds},
                     {"device_hours", eval_rank_seconds / 3600},
                     {"world_size", world_size}};
  j["ratio"] = {{"flops", eval_flops > 0 ? train_flops / eval_flops : 0.0},
                {"rank_seconds", !training.is_null() && eval_rank_seconds > 0
                                     ? training.at("rank_seconds").get<double>() / eval_rank_seconds
                                     : 0.0}};
  return j;
}

std::string cost_line(const nlohmann::json& c) {
  auto sci = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.3g", v);
    return std::string(b);
  };
  const auto& t = c.at("training");
  const auto& e = c.at("evaluation");
  std::string line = "cost: training to this checkpoint ";
  line += t.contains("rank_seconds") ? str(sci(t.at("rank_seconds").get<double>()), " rank-s (",
                                           sci(t.at("device_hours").get<double>()), " device-h), ")
                                     : std::string("(no train records: time unknown), ");
  line += str(sci(t.at("flops").get<double>()), " FLOPs; this evaluation ",
              sci(e.at("rank_seconds").get<double>()), " rank-s, ",
              sci(e.at("flops").get<double>()), " FLOPs; training/evaluation ",
              sci(c.at("ratio").at("flops").get<double>()), "x in FLOPs");
  if (t.contains("rank_seconds")) {
    line += str(", ", sci(c.at("ratio").at("rank_seconds").get<double>()), "x in rank-seconds");
  }
  return line;
}

}  // namespace hpctrain::eval::detail
