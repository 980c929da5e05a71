// Datasets of many files and weighted mixtures (docs/DATA.md, "Many files and mixtures"):
// Dataset::open of a list, glob or directory. The files are expanded and sorted by name, their
// validation is split across the ranks of a group and the findings shared, every file is
// compared with the first, and the files become one ConcatDataset whose global index spans them
// in that order. A mixture is a concatenation of its sources, each a range of that index; the
// sampler blends them (sampler.hpp).

#include <glob.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>

#include "dataset_internal.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace detail {
namespace {

namespace fs = std::filesystem;

struct SourceSpec {
  std::vector<std::string> patterns;
  std::optional<double> weight;
  std::string name;
  bool megatron = false;  ///< format: megatron (patterns are PREFIXes of .bin/.idx pairs)
};

struct ExpandedFile {
  std::string path;  ///< a file, or a Megatron dataset's prefix
  std::string name;
  bool megatron = false;
};

// One file of a dataset, by its format. Local.
std::unique_ptr<Dataset> open_any(const ExpandedFile& file, const DatasetExpectation& expect,
                                  const ReadOptions& options) {
  return file.megatron ? open_megatron(file.path, expect, options)
                       : open_file(file.path, expect, options);
}

bool has_wildcard(const std::string& text) {
  return text.find_first_of("*?[") != std::string::npos;
}

std::string key_of(const DatasetExpectation& expect) {
  return expect.config_key.empty() ? std::string("data") : expect.config_key;
}

std::vector<SourceSpec> parse_spec(const std::string& text, const DatasetExpectation& expect) {
  const std::string key = key_of(expect);
  YAML::Node loaded;
  try {
    loaded = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw DataError(str(key, " = ", clip(text, 200), ": not a YAML list (", e.what(),
                        "): quote entries that hold YAML's flow characters, e.g. "
                        "[\"shard-0[0-4].h5\"]"));
  }
  // One source as a map ({path: PREFIX, format: megatron}) is a list of one. Built as a new node,
  // never assigned over: yaml-cpp's assignment writes through to the node assigned to.
  YAML::Node one(YAML::NodeType::Sequence);
  if (loaded.IsMap()) one.push_back(loaded);
  const YAML::Node list = loaded.IsMap() ? one : loaded;
  if (!list.IsSequence() || list.size() == 0) {
    throw DataError(str(key, " = ", clip(text, 200),
                        ": expected a non-empty list of files, globs or sources {path, weight}"));
  }
  std::vector<SourceSpec> sources;
  SourceSpec files;  // a list of plain paths: one source
  bool any_map = false, any_path = false;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node item = list[i];
    if (item.IsScalar()) {
      any_path = true;
      files.patterns.push_back(item.Scalar());
      continue;
    }
    if (!item.IsMap()) {
      throw DataError(str(key, "[", i, "]: expected a path or {path: ..., weight: ...}"));
    }
    any_map = true;
    SourceSpec source;
    for (const auto& entry : item) {
      const std::string field = entry.first.as<std::string>();
      if (field != "path" && field != "weight" && field != "name" && field != "format") {
        throw DataError(str(key, "[", i, "].", field,
                            ": unknown field of a source (path, weight, name, format)"));
      }
    }
    if (item["format"]) {
      const std::string format = item["format"].Scalar();
      if (format != "hdf5" && format != "megatron") {
        throw DataError(str(key, "[", i, "].format = ", format,
                            ": must be hdf5 (the default) or megatron (PREFIX.bin + PREFIX.idx)"));
      }
      source.megatron = format == "megatron";
    }
    const YAML::Node path = item["path"];
    if (path && path.IsScalar()) {
      source.patterns.push_back(path.Scalar());
    } else if (path && path.IsSequence()) {
      for (const auto& p : path) source.patterns.push_back(p.as<std::string>());
    }
    if (source.patterns.empty()) {
      throw DataError(str(key, "[", i, "]: a source needs path: a file, glob, directory or list"));
    }
    if (item["weight"]) {
      try {
        source.weight = item["weight"].as<double>();
      } catch (const YAML::Exception&) {
        throw DataError(str(key, "[", i, "].weight: expected a positive number"));
      }
      if (!(*source.weight > 0) || !std::isfinite(*source.weight)) {
        throw DataError(str(key, "[", i, "].weight = ", *source.weight,
                            ": must be a positive number (weights are normalised to sum 1)"));
      }
    }
    source.name = item["name"] ? item["name"].as<std::string>() : source.patterns.front();
    sources.push_back(std::move(source));
  }
  if (any_map && any_path) {
    throw DataError(str(key,
                        ": mixes plain paths and {path, weight} sources: give every entry "
                        "as {path: ..., weight: ...}"));
  }
  if (!any_map) return {files};
  if (sources.size() > 1) {
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (!sources[i].weight) {
        throw DataError(str(key, "[", i, "] (", sources[i].name,
                            "): a mixture of several sources needs a weight for each"));
      }
    }
  }
  std::set<std::string> names;
  for (const auto& s : sources) {
    if (!names.insert(s.name).second) {
      throw DataError(str(key, ": two sources are named '", s.name, "': give each a name"));
    }
  }
  return sources;
}

// Expands a Megatron source's pattern into prefixes: a prefix as it is, a glob through the
// .idx files it matches (data/web_* finds data/web_00.idx, ...).
std::vector<ExpandedFile> expand_megatron(const std::string& pattern, const std::string& key) {
  if (!has_wildcard(pattern)) {
    return {{pattern, fs::path(pattern).filename().string(), true}};
  }
  std::vector<ExpandedFile> out;
  glob_t matches{};
  const std::string idx_pattern = pattern + ".idx";
  const int rc = ::glob(idx_pattern.c_str(), GLOB_NOSORT, nullptr, &matches);
  const std::size_t wild = pattern.find_first_of("*?[");
  const std::size_t slash = pattern.rfind('/', wild);
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  for (std::size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
    std::string path = matches.gl_pathv[i];
    path.resize(path.size() - 4);
    out.push_back({path, path.substr(std::min(base, path.size())), true});
  }
  globfree(&matches);
  if (out.empty()) {
    throw DataError(str(key, " pattern '", pattern,
                        "' matches no Megatron dataset (no PATTERN.idx file): check the prefix"));
  }
  return out;
}

// Expands one pattern into files with their names below the pattern's directory.
std::vector<ExpandedFile> expand(const std::string& pattern, const std::string& key) {
  std::vector<ExpandedFile> out;
  struct stat st {};
  if (!has_wildcard(pattern)) {
    if (::stat(pattern.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::error_code ec;
      for (const auto& entry : fs::directory_iterator(pattern, ec)) {
        const std::string ext = entry.path().extension().string();
        if ((ext == ".h5" || ext == ".hdf5") && entry.is_regular_file(ec)) {
          out.push_back({entry.path().string(), entry.path().filename().string(), false});
        }
      }
      if (ec)
        throw DataError(str(key, " directory '", pattern, "' cannot be read: ", ec.message()));
      if (out.empty()) {
        throw DataError(str(key, " directory '", pattern,
                            "' is a directory without *.h5 or *.hdf5 files: point ", key,
                            " at the directory of the dataset's files, or a glob of them"));
      }
      return out;
    }
    // A plain file (checked, with its own messages, when it is opened).
    return {{pattern, fs::path(pattern).filename().string(), false}};
  }
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &matches);
  // The names are relative to the directory above the first component with a wildcard.
  const std::size_t wild = pattern.find_first_of("*?[");
  const std::size_t slash = pattern.rfind('/', wild);
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  for (std::size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i) {
    const std::string path = matches.gl_pathv[i];
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;
    out.push_back({path, path.substr(std::min(base, path.size())), false});
  }
  globfree(&matches);
  if (out.empty()) {
    throw DataError(str(key, " pattern '", pattern,
                        "' matches no file: check the path (a glob such as data/shard-*.h5)"));
  }
  return out;
}

std::vector<ExpandedFile> expand_source(const SourceSpec& source, const std::string& key) {
  std::vector<ExpandedFile> files;
  for (const auto& pattern : source.patterns) {
    auto more = source.megatron ? expand_megatron(pattern, key) : expand(pattern, key);
    files.insert(files.end(), more.begin(), more.end());
  }
  // Sorted by name, byte-wise (glob's own order follows the locale).
  std::sort(files.begin(), files.end(),
            [](const ExpandedFile& a, const ExpandedFile& b) { return a.path < b.path; });
  for (std::size_t i = 1; i < files.size(); ++i) {
    if (files[i].path == files[i - 1].path) {
      throw DataError(str(key, ": file '", files[i].path,
                          "' is listed twice (by two entries or patterns): list each file once"));
    }
  }
  return files;
}

std::string to_hex(std::uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = digits[v & 15];
  return out;
}

nlohmann::json info_to_json(const DatasetInfo& info) {
  return {{"kind", static_cast<int>(info.kind)}, {"num_samples", info.num_samples},
          {"sample_shape", info.sample_shape},   {"target_shape", info.target_shape},
          {"input_dtype", info.input_dtype},     {"input_scale", info.input_scale},
          {"num_classes", info.num_classes},     {"classes_declared", info.classes_declared},
          {"vocab_size", info.vocab_size},       {"seq_len", info.seq_len},
          {"num_tokens", info.num_tokens},       {"sample_bytes", info.sample_bytes},
          {"chunk_shape", info.chunk_shape},     {"checksum", metadata_checksum(info)}};
}

DatasetInfo info_from_json(const nlohmann::json& j, const std::string& path) {
  DatasetInfo info;
  info.path = path;
  info.kind = static_cast<DatasetKind>(j.at("kind").get<int>());
  info.num_samples = j.at("num_samples").get<std::int64_t>();
  info.sample_shape = j.at("sample_shape").get<std::vector<std::int64_t>>();
  info.target_shape = j.at("target_shape").get<std::vector<std::int64_t>>();
  info.input_dtype = j.at("input_dtype").get<std::string>();
  info.input_scale = j.at("input_scale").get<double>();
  info.num_classes = j.at("num_classes").get<std::int64_t>();
  info.classes_declared = j.at("classes_declared").get<bool>();
  info.vocab_size = j.at("vocab_size").get<std::int64_t>();
  info.seq_len = j.at("seq_len").get<std::int64_t>();
  info.num_tokens = j.at("num_tokens").get<std::int64_t>();
  info.sample_bytes = j.at("sample_bytes").get<std::int64_t>();
  info.chunk_shape = j.at("chunk_shape").get<std::vector<std::int64_t>>();
  return info;
}

// Names the first field in which `b` differs from `a` (empty when they agree).
std::string first_difference(const DatasetInfo& a, const DatasetInfo& b) {
  if (a.kind != b.kind) {
    return str("kind (", task_name(a.kind), " against ", task_name(b.kind), ")");
  }
  if (a.sample_shape != b.sample_shape) {
    return str("sample shape (", h5::shape_string(a.sample_shape), " against ",
               h5::shape_string(b.sample_shape), ")");
  }
  if (a.target_shape != b.target_shape) {
    return str("target shape (", h5::shape_string(a.target_shape), " against ",
               h5::shape_string(b.target_shape), ")");
  }
  // Token ids of any integer type widen to the same int64 ids: only other kinds must agree.
  if (a.input_dtype != b.input_dtype && a.kind != DatasetKind::kLanguageModel) {
    return str("dtype (", a.input_dtype, " against ", b.input_dtype, ")");
  }
  if (a.input_scale != b.input_scale) {
    return str("attribute scale (", a.input_scale, " against ", b.input_scale, ")");
  }
  if (a.kind == DatasetKind::kClassification && a.classes_declared && b.classes_declared &&
      a.num_classes != b.num_classes) {
    return str("number of classes (", a.num_classes, " against ", b.num_classes, ")");
  }
  if (a.kind == DatasetKind::kLanguageModel && a.vocab_size != b.vocab_size) {
    return str("vocabulary (vocab_size ", a.vocab_size, " against ", b.vocab_size, ")");
  }
  return {};
}

// The files of a dataset as one: global index i lies in file f with begin[f] <= i < begin[f+1].
// Files are opened on first read (trusted: validated before) and kept open up to
// max_open_files, the least recently read closed first.
class ConcatDataset final : public Dataset {
 public:
  ConcatDataset(DatasetInfo info, std::vector<DatasetInfo> files,
                std::vector<ExpandedFile> expanded, DatasetExpectation expect, ReadOptions options)
      : info_(std::move(info)),
        files_(std::move(files)),
        expanded_(std::move(expanded)),
        expect_(std::move(expect)),
        options_(options),
        open_(files_.size()) {
    begin_.push_back(0);
    for (const auto& f : files_) begin_.push_back(begin_.back() + f.num_samples);
    options_.trusted = true;
    options_.max_open_files = std::max(1, options_.max_open_files);
    // The chunk cache budget (auto: 256 MiB) is shared by the files open at once.
    const std::uint64_t budget =
        options.chunk_cache_bytes > 0 ? options.chunk_cache_bytes : (256ull << 20);
    const auto open_at_once =
        std::min<std::size_t>(files_.size(), static_cast<std::size_t>(options_.max_open_files));
    options_.chunk_cache_bytes =
        std::max<std::uint64_t>(1, budget / std::max<std::size_t>(1, open_at_once));
    expect_.min_samples = 0;
  }

  const DatasetInfo& info() const override { return info_; }

  Batch read(const std::vector<std::int64_t>& indices) override {
    const auto batch = static_cast<std::int64_t>(indices.size());
    // Split the request by file, keeping each row's position in the batch.
    std::map<std::size_t, std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>>> parts;
    for (std::int64_t k = 0; k < batch; ++k) {
      const std::int64_t index = indices[static_cast<std::size_t>(k)];
      if (index < 0 || index >= info_.num_samples) {
        throw DataError(str(key_of(expect_), ": sample index ", index, " (position ", k,
                            " of the request) is outside [0, ", info_.num_samples,
                            "): the sampler and the files disagree on the sample count"));
      }
      const auto f = static_cast<std::size_t>(
          std::upper_bound(begin_.begin(), begin_.end(), index) - begin_.begin() - 1);
      auto& part = parts[f];
      part.first.push_back(index - begin_[f]);
      part.second.push_back(k);
    }
    if (parts.empty()) return file(0).read({});
    Batch out;
    if (parts.size() == 1) {
      out = file(parts.begin()->first).read(parts.begin()->second.first);
    } else {
      for (auto& [f, part] : parts) {
        Batch piece = file(f).read(part.first);
        if (!out.inputs.defined()) {
          auto in_shape = piece.inputs.sizes().vec();
          auto target_shape = piece.targets.sizes().vec();
          in_shape[0] = batch;
          target_shape[0] = batch;
          out.inputs = torch::empty(in_shape, piece.inputs.options());
          out.targets = torch::empty(target_shape, piece.targets.options());
        }
        const auto rows = torch::tensor(part.second, torch::kLong);
        out.inputs.index_copy_(0, rows, piece.inputs);
        out.targets.index_copy_(0, rows, piece.targets);
      }
    }
    out.indices = indices;
    return out;
  }

 private:
  Dataset& file(std::size_t f) {
    auto& slot = open_[f];
    if (slot) {
      recent_.splice(recent_.begin(), recent_, slot_pos_[f]);
      return *slot;
    }
    while (static_cast<int>(recent_.size()) >= options_.max_open_files) {
      const std::size_t last = recent_.back();
      recent_.pop_back();
      open_[last].reset();
    }
    slot = open_any(expanded_[f], expect_, options_);
    if (slot->info().num_samples != files_[f].num_samples ||
        metadata_checksum(slot->info()) != metadata_checksum(files_[f])) {
      throw DataError(str(file_label(files_[f].path, expect_.config_key),
                          " changed after it was validated (now ", slot->info().num_samples,
                          " samples, was ", files_[f].num_samples,
                          "): do not rewrite a dataset's files while a run reads them"));
    }
    recent_.push_front(f);
    slot_pos_[f] = recent_.begin();
    return *slot;
  }

  DatasetInfo info_;
  std::vector<DatasetInfo> files_;
  std::vector<ExpandedFile> expanded_;
  DatasetExpectation expect_;
  ReadOptions options_;
  std::vector<std::int64_t> begin_;
  std::vector<std::unique_ptr<Dataset>> open_;
  std::list<std::size_t> recent_;
  std::map<std::size_t, std::list<std::size_t>::iterator> slot_pos_;
};

// Validates every file (this rank's share with a group) and returns each file's info, the same
// on every rank; throws the first problem (on every rank alike with a group).
std::vector<DatasetInfo> validate(const std::vector<ExpandedFile>& files,
                                  const DatasetExpectation& expect, const ReadOptions& options,
                                  comm::ControlPlane* group) {
  const int size = group != nullptr ? group->size() : 1;
  const int rank = group != nullptr ? group->rank() : 0;
  DatasetExpectation one = expect;
  one.min_samples = 0;
  nlohmann::json mine = nlohmann::json::object();
  std::string problem;
  for (std::size_t f = static_cast<std::size_t>(rank); f < files.size();
       f += static_cast<std::size_t>(size)) {
    try {
      auto dataset = open_any(files[f], one, options);
      mine[std::to_string(f)] = info_to_json(dataset->info());
    } catch (const Error& e) {
      problem = e.what();
      break;
    }
  }
  std::vector<DatasetInfo> infos(files.size());
  if (group == nullptr) {
    if (!problem.empty()) throw DataError(problem);
    for (auto& [f, j] : mine.items()) {
      const auto i = static_cast<std::size_t>(std::stoul(f));
      infos[i] = info_from_json(j, files[i].path);
    }
    return infos;
  }
  if (auto first = group->first_problem(problem)) {
    throw AgreedDataError(first->first == 0
                              ? first->second
                              : str(first->second, " (found by rank ", first->first, ")"));
  }
  for (int r = 0; r < size; ++r) {
    const auto j = nlohmann::json::parse(group->broadcast(r == rank ? mine.dump() : "", r));
    for (auto& [f, entry] : j.items()) {
      const auto i = static_cast<std::size_t>(std::stoul(f));
      infos[i] = info_from_json(entry, files[i].path);
    }
  }
  return infos;
}

}  // namespace

std::string metadata_checksum(const DatasetInfo& info) {
  std::string text = str(static_cast<int>(info.kind), "|", info.num_samples, "|",
                         h5::shape_string(info.sample_shape), "|",
                         h5::shape_string(info.target_shape), "|", info.input_dtype, "|",
                         info.input_scale, "|", info.classes_declared ? info.num_classes : 0, "|",
                         info.vocab_size, "|", info.num_tokens, "|");
  struct stat st {};
  if (!info.path.empty() && ::stat(info.path.c_str(), &st) == 0) {
    text += std::to_string(st.st_size);
  } else if (!info.path.empty() && ::stat((info.path + ".bin").c_str(), &st) == 0) {
    text += std::to_string(st.st_size);  // a Megatron dataset's prefix
  }
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const unsigned char c : text) h = (h ^ c) * 0x100000001B3ull;
  return to_hex(h);
}

}  // namespace detail

std::unique_ptr<Dataset> Dataset::open(const std::string& path, const DatasetExpectation& expect,
                                       const ReadOptions& options, comm::ControlPlane* group) {
  using namespace detail;
  // A YAML list, or one source as a map ({path: PREFIX, format: megatron}).
  const bool list = !path.empty() && (path.front() == '[' || path.front() == '{');
  struct stat st {};
  const bool plain =
      !list && !has_wildcard(path) && !(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  if (plain) {
    auto dataset = open_file(path, expect, options);
    auto& info = const_cast<DatasetInfo&>(dataset->info());
    info.files = {DataFileRecord{path, std::filesystem::path(path).filename().string(),
                                 info.num_samples, metadata_checksum(info)}};
    return dataset;
  }
  const std::string key = key_of(expect);
  const std::vector<SourceSpec> specs =
      list ? parse_spec(path, expect) : std::vector<SourceSpec>{SourceSpec{{path}, {}, path}};
  std::vector<ExpandedFile> files;
  std::vector<std::pair<std::size_t, std::size_t>> source_files;  // [first, end) per source
  std::set<std::string> seen;
  for (const auto& spec : specs) {
    auto expanded = expand_source(spec, key);
    for (const auto& f : expanded) {
      if (!seen.insert(f.path).second) {
        throw DataError(str(key, ": file '", f.path,
                            "' belongs to two sources: give each file "
                            "to one source"));
      }
    }
    source_files.emplace_back(files.size(), files.size() + expanded.size());
    files.insert(files.end(), expanded.begin(), expanded.end());
  }
  std::vector<DatasetInfo> infos = validate(files, expect, options, group);
  // From here every rank decides alike from the same findings: one message, no abort.
  auto fail = [group](const std::string& message) {
    if (group != nullptr) throw AgreedDataError(message);
    throw DataError(message);
  };
  DatasetInfo info = infos.front();
  info.path = path;
  info.num_samples = 0;
  info.num_tokens = 0;
  std::int64_t max_classes = 0;
  for (std::size_t f = 0; f < infos.size(); ++f) {
    const std::string diff = first_difference(infos.front(), infos[f]);
    if (!diff.empty()) {
      fail(str(file_label(files[f].path, expect.config_key), " differs from '", files.front().path,
               "' in its ", diff,
               ": every file of a dataset holds the same kind of samples; fix or "
               "remove that file"));
    }
    info.num_samples += infos[f].num_samples;
    info.num_tokens += infos[f].num_tokens;
    max_classes = std::max(max_classes, infos[f].num_classes);
    info.classes_declared = info.classes_declared || infos[f].classes_declared;
    info.files.push_back(DataFileRecord{files[f].path, files[f].name, infos[f].num_samples,
                                        metadata_checksum(infos[f])});
  }
  if (info.kind == DatasetKind::kClassification) {
    for (const auto& f : infos) {
      if (f.classes_declared) max_classes = f.num_classes;
    }
    info.num_classes = max_classes;
  }
  if (specs.size() >= 2) {
    std::int64_t begin = 0;
    for (std::size_t s = 0; s < specs.size(); ++s) {
      std::int64_t count = 0;
      for (std::size_t f = source_files[s].first; f < source_files[s].second; ++f) {
        count += infos[f].num_samples;
      }
      info.sources.push_back(SamplerSource{specs[s].name, *specs[s].weight, begin, count});
      begin += count;
    }
  }
  if (info.num_samples < expect.min_samples) {
    fail(str(key, ": its ", files.size(), " files hold ", info.num_samples,
             " samples, fewer than one global batch of ", expect.min_samples,
             " (data.batch_size x data-parallel ranks): use a smaller data.batch_size, "
             "fewer ranks, or more data"));
  }
  return std::make_unique<ConcatDataset>(std::move(info), std::move(infos), std::move(files),
                                         expect, options);
}

}  // namespace hpctrain::data
