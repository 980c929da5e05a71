#include "hpctrain/checkpoint/verify.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

// One file against its manifest entry: present, a regular file, the recorded size and xxh3.
std::string check_file(const std::string& dir, const std::string& name, const nlohmann::json& entry,
                       std::string& buffer) {
  const std::string path = dir + "/" + name;
  const auto want_bytes = entry.at("bytes").get<std::uint64_t>();
  const runtime::PathType type = runtime::path_type(path);
  if (type == runtime::PathType::kMissing) {
    return str(name, ": missing (the manifest lists it with ", want_bytes, " bytes)");
  }
  if (type != runtime::PathType::kRegular) {
    return str(name, ": not a regular file (", runtime::path_type_name(type),
               "; the manifest lists a file of ", want_bytes, " bytes): it was replaced");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return str(name, ": missing (the manifest lists it with ", want_bytes, " bytes)");
  }
  if (static_cast<std::uint64_t>(st.st_size) != want_bytes) {
    return str(name, ": size ", st.st_size, " bytes but the manifest says ", want_bytes,
               ": the file was truncated or replaced");
  }
  FileDigest digest;
  try {
    digest = digest_file(path, buffer);
  } catch (const CheckpointError& e) {
    return str(name, ": ", e.what());
  }
  const auto want = entry.at("xxh3").get<std::string>();
  if (digest.xxh3 != want) {
    return str(name, ": checksum mismatch (manifest xxh3 ", want, ", file ", digest.xxh3,
               "): the file was modified or damaged after it was written");
  }
  return {};
}

// The checks after the manifest parsed; returns the reason of the first failure, empty if none.
std::string check_files(const std::string& dir, const nlohmann::json& manifest) {
  const std::string base = std::filesystem::path(dir).filename().string();
  if (auto step = parse_step_dir_name(base)) {
    const auto saved = manifest.at("step").get<std::int64_t>();
    if (*step != saved) {
      return str(kManifestFile, ": step ", saved, " but the directory is named ", base,
                 ": the manifest belongs to another checkpoint");
    }
  }
  std::string buffer;
  for (const auto& [name, entry] : manifest.at("files").items()) {
    std::string reason = check_file(dir, name, entry, buffer);
    if (!reason.empty()) return reason;
  }
  // Every listed tensor present with its shape: the files are HDF5 and hold what the manifest says.
  struct Expected {
    std::string name;
    std::string dataset;
    std::vector<std::int64_t> shape;
    std::string dtype;  ///< empty: not checked
  };
  std::map<std::string, std::vector<Expected>> by_file;
  for (const auto& [name, t] : manifest.at("tensors").items()) {
    by_file[t.at("file").get<std::string>()].push_back(
        {name, t.at("dataset").get<std::string>(), t.at("shape").get<std::vector<std::int64_t>>(),
         t.at("dtype").get<std::string>()});
  }
  if (manifest.contains("rng") && manifest.at("rng").is_object()) {
    const auto& rng = manifest.at("rng");
    by_file[rng.value("file", std::string("rng.h5"))].push_back(
        {"rng",
         rng.value("dataset", std::string("/cpu")),
         {rng.value("ranks", std::int64_t{0}), rng.value("bytes", std::int64_t{0})},
         "uint8"});
  }
  for (const auto& [file, expected] : by_file) {
    std::vector<std::string> datasets;
    for (const Expected& e : expected) datasets.push_back(e.dataset);
    std::vector<std::optional<h5::DatasetLayout>> found;
    try {
      found = h5::describe_datasets(dir + "/" + file, datasets);
    } catch (const CheckpointError& e) {
      return str(file, ": not readable as HDF5: ", e.what());
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const Expected& e = expected[i];
      if (!found[i]) {
        return str(file, ": tensor '", e.name, "' (dataset ", e.dataset,
                   ") is missing although the manifest lists it");
      }
      if (found[i]->shape != e.shape) {
        return str(file, ": tensor '", e.name, "' has shape ", slab::shape_text(found[i]->shape),
                   " but the manifest says ", slab::shape_text(e.shape));
      }
      if (!e.dtype.empty() && found[i]->dtype != e.dtype) {
        return str(file, ": tensor '", e.name, "' holds ", found[i]->dtype,
                   " but the manifest says dtype ", e.dtype,
                   ": the manifest was edited, or the file replaced");
      }
    }
  }
  return {};
}

}  // namespace

Verification verify(const std::string& dir) {
  Verification v;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    v.reason = str("'", dir, "' does not exist");
    return v;
  }
  if (!S_ISDIR(st.st_mode)) {
    v.reason = str("'", dir, "' is not a directory (a checkpoint is a step_<N> directory)");
    return v;
  }
  try {
    const nlohmann::json manifest = read_manifest(dir);
    v.reason = check_files(dir, manifest);
  } catch (const CheckpointError& e) {
    v.reason = e.what();
  } catch (const std::exception& e) {
    v.reason = str(kManifestFile, ": ", e.what());
  }
  v.ok = v.reason.empty();
  return v;
}

std::string verify_file(const std::string& dir, const nlohmann::json& manifest,
                        const std::string& name) {
  const nlohmann::json& files = manifest.at("files");
  if (!files.contains(name)) return str(name, ": not listed in ", kManifestFile);
  std::string buffer;
  try {
    return check_file(dir, name, files.at(name), buffer);
  } catch (const std::exception& e) {
    return str(name, ": ", e.what());
  }
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  const std::string root = checkpoints_dir(run_dir);
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    const auto step = parse_step_dir_name(name);
    std::error_code dir_ec;
    if (step && entry.is_directory(dir_ec)) found.emplace_back(*step, root + "/" + name);
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::optional<std::string> read_latest(const std::string& run_dir) {
  const std::string path = checkpoints_dir(run_dir) + "/" + kLatestFile;
  struct stat st {};
  // Only a small regular file: reading a FIFO would block.
  if (runtime::path_type(path) != runtime::PathType::kRegular || ::stat(path.c_str(), &st) != 0 ||
      st.st_size > 4096) {
    return std::nullopt;
  }
  std::string text;
  try {
    text = io::read_file(path);
  } catch (const CheckpointError&) {
    return std::nullopt;
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (!parse_step_dir_name(text)) return std::nullopt;
  return checkpoints_dir(run_dir) + "/" + text;
}

std::string checkpoint_dir_of(const std::string& path) {
  runtime::require_readable_directory(path, runtime::FileKind::kCheckpoint, "checkpoint",
                                      "pass a step_<N> directory or a run directory");
  if (std::filesystem::exists(path + "/manifest.json")) return path;
  for (const std::string& run : {path, std::filesystem::path(path).parent_path().string()}) {
    if (auto latest = read_latest(run)) return *latest;
  }
  throw CheckpointError(str(path,
                            " is neither a checkpoint (no manifest.json) nor a run directory "
                            "with a checkpoints/latest pointer: pass a step_<N> directory"));
}

namespace {

// verify(dir), then the reader's check of its manifest.
Verification verify_for(const std::string& dir, const ManifestCheck& check) {
  Verification v = verify(dir);
  if (!v.ok || !check) return v;
  try {
    const std::string problem = check(read_manifest(dir));
    if (!problem.empty()) {
      v.ok = false;
      v.reason = str("manifest.json: ", problem,
                     ": the manifest was edited or damaged after it was written (its checksum "
                     "was recomputed)");
    }
  } catch (const CheckpointError& e) {
    v.ok = false;
    v.reason = e.what();
  }
  return v;
}

}  // namespace

ResumeChoice choose_resume(const std::string& run_dir, const std::string& resume,
                           const ManifestCheck& check) {
  ResumeChoice choice;
  if (resume.empty() || resume == "none") return choice;
  if (resume != "auto") {
    std::string dir = resume;
    struct stat st {};
    const std::string in_run = checkpoints_dir(run_dir) + "/" + resume;
    if (::stat(dir.c_str(), &st) != 0 && ::stat(in_run.c_str(), &st) == 0) dir = in_run;
    const Verification v = verify_for(dir, check);
    if (v.ok) {
      choice.path = dir;
    } else {
      choice.error = str("cannot resume from checkpoint '", resume, "': ", v.reason,
                         ": pick another checkpoint (`hpctrain inspect checkpoint ",
                         checkpoints_dir(run_dir), "` lists them) or resume = auto");
    }
    return choice;
  }
  const auto latest = read_latest(run_dir);
  const std::string latest_path = checkpoints_dir(run_dir) + "/" + kLatestFile;
  struct stat latest_st {};
  if (!latest && ::stat(latest_path.c_str(), &latest_st) == 0) {
    // Present but not a step_<N> name (garbage, a path such as ../../etc): say so, then scan.
    std::string text;
    try {
      const runtime::PathType type = runtime::path_type(latest_path);
      text = type == runtime::PathType::kRegular && latest_st.st_size <= 4096
                 ? io::read_file(latest_path)
             : type == runtime::PathType::kRegular
                 ? std::string("(not a small file)")
                 : str("(", runtime::path_type_name(type), ", not a regular file)");
    } catch (const CheckpointError& e) {
      text = e.what();
    }
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
    std::string shown;
    for (unsigned char c : clip(text, 80)) {
      shown += c >= 32 && c < 127 ? std::string(1, static_cast<char>(c)) : str("\\x", std::hex, +c);
    }
    choice.skipped.push_back(
        str(latest_path, " holds '", shown, "', not the name of a checkpoint (step_<N>): ignored"));
  }
  if (latest) {
    const Verification v = verify_for(*latest, check);
    if (v.ok) {
      choice.path = *latest;
      return choice;
    }
    choice.skipped.push_back(str(*latest, " (named by ", kLatestFile, "): ", v.reason));
  }
  for (const std::string& dir : list_checkpoints(run_dir)) {
    if (latest && dir == *latest) continue;
    const Verification v = verify_for(dir, check);
    if (v.ok) {
      choice.path = dir;
      break;
    }
    choice.skipped.push_back(str(dir, ": ", v.reason));
  }
  return choice;
}

}  // namespace hpctrain::checkpoint
