#include "hpctrain/checkpoint/manifest.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::checkpoint {
namespace {

constexpr std::size_t kDigestBuffer = 8 << 20;
constexpr const char* kSealKey = "manifest_xxh3";

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// Invalid UTF-8 in a trainer-state string must not make a save fail: it is replaced, the same
// way when sealing and when checking.
std::string compact(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_file_part(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

void require(bool ok, const std::string& what, const std::string& problem) {
  if (!ok) {
    throw CheckpointError(str(what, ": ", problem,
                              ": the manifest is damaged or not an hpctrain checkpoint manifest; "
                              "resume from another checkpoint"));
  }
}

bool is_int(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_number_integer();
}

// A field whose type is right but whose value cannot be (a manifest edited and resealed, or
// written by a faulty tool): names the field, its value and what it must be.
void require_value(bool ok, const std::string& what, const std::string& field,
                   const nlohmann::json& value, const std::string& must) {
  if (!ok) {
    throw CheckpointError(str(what, ": ", field, " is ", clip(compact(value), 80), " but ", must,
                              ": the manifest was edited or damaged after it was written "
                              "(its checksum was recomputed); resume from another checkpoint"));
  }
}

// The values' ranges and their consistency with each other and with the tensors, once every
// field has its type (docs/CHECKPOINTS.md, "Trust"). What only the trainer can judge (the
// sample position against the data) is checked when it resumes (train/resume_checks.hpp).
void check_values(const nlohmann::json& j, const std::string& what) {
  for (const char* key : {"step", "epoch", "consumed_samples"}) {
    require_value(j.at(key).get<std::int64_t>() >= 0, what, key, j.at(key),
                  "it must be a non-negative integer");
  }
  const auto& grid = j.at("grid");
  std::int64_t product = 1;
  for (const auto& [axis, size] : grid.items()) {
    require_value(size.is_number_integer() && size.get<std::int64_t>() >= 1 &&
                      size.get<std::int64_t>() <= (std::int64_t{1} << 20),
                  what, "grid." + axis, size, "every grid size must be a positive integer");
    product = std::min(product * size.get<std::int64_t>(), std::int64_t{1} << 40);
  }
  const auto world = j.at("world_size").get<std::int64_t>();
  require_value(world >= 1 && world == product, what, "world_size", j.at("world_size"),
                str("the grid ", compact(grid), " says ", product,
                    " ranks: world_size must be the product of the grid's sizes"));
  const auto tp = grid.at("tp").get<std::int64_t>();
  for (const auto& [name, t] : j.at("tensors").items()) {
    if (!t.contains("saved_tp")) continue;
    require_value(
        t.at("saved_tp").is_number_integer() && t.at("saved_tp").get<std::int64_t>() == tp, what,
        str("tensors['", clip(name), "'].saved_tp"), t.at("saved_tp"),
        str("the grid says tp=", tp));
  }
  if (j.contains("rng") && j.at("rng").is_object()) {
    require_value(j.at("rng").at("ranks").get<std::int64_t>() == world, what, "rng.ranks",
                  j.at("rng").at("ranks"), str("it must be world_size, ", world));
  }
}

}  // namespace

std::string step_dir_name(std::int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::optional<std::int64_t> parse_step_dir_name(const std::string& name) {
  constexpr std::size_t kPrefix = 5;  // "step_"
  if (name.size() < kPrefix + 8 || name.size() > kPrefix + 18 || name.compare(0, kPrefix, "step_"))
    return std::nullopt;
  std::int64_t step = 0;
  for (std::size_t i = kPrefix; i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  // Exactly the spelling step_dir_name produces: no extra leading zeros beyond 8 digits.
  if (step_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string checkpoints_dir(const std::string& run_dir) {
  return run_dir + "/checkpoints";
}

TensorLocation tensor_location(const std::string& record_name) {
  const std::size_t slash = record_name.find('/');
  auto bad = [&](const std::string& why) {
    return CheckpointError(str("tensor record '", record_name, "': ", why,
                               ": name records <file>/<path>, e.g. model/fc1.weight or "
                               "optimizer/exp_avg/fc1.weight (docs/CHECKPOINTS.md)"));
  };
  if (slash == std::string::npos) throw bad("no '/' between the file and the dataset path");
  const std::string file = record_name.substr(0, slash);
  if (!is_file_part(file)) throw bad("the file part must be letters, digits and '_'");
  if (file == "rng") throw bad("the file 'rng' is reserved for RNG states");
  const std::string path = record_name.substr(slash + 1);
  std::size_t begin = 0;
  while (begin <= path.size()) {
    std::size_t end = path.find('/', begin);
    if (end == std::string::npos) end = path.size();
    const std::string part = path.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") {
      throw bad("empty, '.' or '..' path component");
    }
    begin = end + 1;
  }
  return {file + ".h5", "/" + path};
}

std::string xxh3_hex(const std::string& text) {
  return hex64(XXH3_64bits(text.data(), text.size()));
}

FileDigest digest_file(const std::string& path, std::string& buffer) {
  if (buffer.size() < kDigestBuffer) buffer.resize(kDigestBuffer);
  io::Fd fd = io::open_regular(path);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  FileDigest digest;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError(str("reading '", path, "' failed: ", io::errno_text(errno)));
    }
    if (n == 0) break;
    XXH3_64bits_update(state.get(), buffer.data(), static_cast<std::size_t>(n));
    digest.bytes += static_cast<std::uint64_t>(n);
  }
  digest.xxh3 = hex64(XXH3_64bits_digest(state.get()));
  return digest;
}

std::string seal_manifest(nlohmann::json manifest) {
  manifest.erase(kSealKey);
  manifest[kSealKey] = xxh3_hex(compact(manifest));
  return manifest.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

nlohmann::json parse_manifest(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  require(!j.is_discarded() && j.is_object(), what, "not valid JSON");
  require(j.value("format", std::string()) == kFormatName, what,
          str("\"format\" should be \"", kFormatName, "\""));
  require(is_int(j, "format_version"), what, "\"format_version\" missing");
  const auto version = j.at("format_version").get<std::int64_t>();
  if (version > kFormatVersion || version < 1) {
    throw CheckpointError(str(what, ": format_version ", version, " but this hpctrain reads 1..",
                              kFormatVersion, ": load it with the hpctrain version that wrote it (",
                              j.value("hpctrain_version", std::string("unknown")), ")"));
  }
  require(j.contains(kSealKey) && j.at(kSealKey).is_string(), what, "\"manifest_xxh3\" missing");
  const std::string sealed = j.at(kSealKey).get<std::string>();
  nlohmann::json body = j;
  body.erase(kSealKey);
  const std::string actual = xxh3_hex(compact(body));
  if (actual != sealed) {
    throw CheckpointError(str(what, ": checksum mismatch (manifest_xxh3 says ", sealed,
                              ", the content hashes to ", actual,
                              "): the manifest was modified or damaged after it was written; "
                              "resume from another checkpoint"));
  }
  for (const char* key : {"step", "epoch", "consumed_samples", "world_size"}) {
    require(is_int(j, key), what, str("\"", key, "\" missing or not an integer"));
  }
  require(j.contains("grid") && is_int(j.at("grid"), "dp") && is_int(j.at("grid"), "tp"), what,
          "\"grid\" should be {\"dp\": int, \"tp\": int}");
  require(!j.contains("trainer_state") || j.at("trainer_state").is_object(), what,
          "\"trainer_state\" should be an object");
  require(!j.contains("metric") || j.at("metric").is_null() || j.at("metric").is_number(), what,
          "\"metric\" should be a number or null");
  if (j.contains("rng") && !j.at("rng").is_null()) {
    const auto& rng = j.at("rng");
    require(
        rng.is_object() && is_int(rng, "ranks") && is_int(rng, "bytes") &&
            rng.at("ranks").get<std::int64_t>() >= 1 && rng.at("bytes").get<std::int64_t>() >= 1 &&
            rng.at("bytes").get<std::int64_t>() <= (std::int64_t{1} << 20) &&
            (!rng.contains("file") || rng.at("file").is_string()) &&
            (!rng.contains("dataset") || rng.at("dataset").is_string()),
        what,
        "\"rng\" should be null or {\"file\", \"dataset\", \"ranks\" >= 1, \"bytes\" in 1..1 MiB}");
  }
  require(j.contains("files") && j.at("files").is_object(), what, "\"files\" missing");
  for (const auto& [name, file] : j.at("files").items()) {
    require(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
            what,
            str("files entry '", clip(name), "' should be a file name inside the checkpoint"));
    require(file.is_object() && file.contains("bytes") && file.at("bytes").is_number_unsigned() &&
                file.contains("xxh3") && file.at("xxh3").is_string(),
            what, str("files entry '", name, "' should hold bytes and xxh3"));
  }
  require(j.contains("tensors") && j.at("tensors").is_object(), what, "\"tensors\" missing");
  for (const auto& [name, t] : j.at("tensors").items()) {
    require(
        t.is_object() && t.contains("file") && t.at("file").is_string() && t.contains("dataset") &&
            t.at("dataset").is_string() && t.contains("dtype") && t.at("dtype").is_string() &&
            t.contains("shape") && t.at("shape").is_array() && is_int(t, "split_dim"),
        what,
        str("tensors entry '", clip(name), "' should hold file, dataset, dtype, shape, split_dim"));
    const std::string dtype = t.at("dtype").get<std::string>();
    require(h5::dtype_from_name(dtype).has_value(), what,
            str("tensor '", clip(name), "' has dtype '", clip(dtype),
                "', which is none of the dtypes checkpoints store"));
    const auto& shape = t.at("shape");
    bool shape_ok = shape.size() <= 32;
    for (const auto& d : shape)
      shape_ok = shape_ok && d.is_number_integer() && d.get<std::int64_t>() >= 0;
    require(shape_ok, what,
            str("tensor '", clip(name), "' should have a shape of non-negative integers"));
    const auto split_dim = t.at("split_dim").get<std::int64_t>();
    require(split_dim >= -1 && split_dim < static_cast<std::int64_t>(shape.size()), what,
            str("tensor '", clip(name), "' has split_dim ", split_dim, " outside [-1, ",
                shape.size(), ")"));
    require(j.at("files").contains(t.at("file").get<std::string>()), what,
            str("tensor '", name, "' is in file '", t.at("file").get<std::string>(),
                "', which \"files\" does not list"));
  }
  check_values(j, what);
  return j;
}

nlohmann::json read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  if (runtime::path_type(path) == runtime::PathType::kMissing) {
    throw CheckpointError(str("missing ", kManifestFile, " in '", dir,
                              "': not a complete checkpoint (a save that never committed writes "
                              "its manifest last); resume from another checkpoint"));
  }
  return parse_manifest(io::read_file(path), path);
}

}  // namespace hpctrain::checkpoint
