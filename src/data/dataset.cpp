// Dataset::open: the checks every file gets before its kind-specific reader validates it, and
// the helpers both readers share.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <numeric>

#include "dataset_internal.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace detail {
namespace {

constexpr std::uint64_t kAutoCacheLimit = 256ull << 20;

std::uint64_t next_prime(std::uint64_t n) {
  auto is_prime = [](std::uint64_t v) {
    if (v < 2) return false;
    for (std::uint64_t d = 2; d * d <= v; ++d) {
      if (v % d == 0) return false;
    }
    return true;
  };
  while (!is_prime(n)) ++n;
  return n;
}

std::string first_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char buffer[8] = {0};
  in.read(buffer, sizeof buffer);
  std::string out;
  for (std::streamsize i = 0; i < in.gcount(); ++i) {
    const auto c = static_cast<unsigned char>(buffer[i]);
    out += (c >= 32 && c < 127) ? std::string(1, static_cast<char>(c)) : str("\\x", std::hex, +c);
  }
  return out;
}

std::string root_objects(hid_t file) {
  std::vector<std::string> names;
  hsize_t index = 0;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    return 0;
  };
  if (H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names) < 0) {
    h5::take_error_detail();
  }
  if (names.empty()) return "nothing";
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

}  // namespace

void require_sample_values(const std::string& where, const std::vector<std::int64_t>& dims) {
  for (std::size_t i = 1; i < dims.size(); ++i) {
    if (dims[i] != 0) continue;
    const std::vector<std::int64_t> sample(dims.begin() + 1, dims.end());
    throw DataError(str(where, ": shape ", h5::shape_string(dims), ": each sample (shape ",
                        h5::shape_string(sample), ") holds no values (dimension ", i,
                        " is 0): write the samples with their real shape (docs/DATA.md)"));
  }
}

std::string file_label(const std::string& path, const std::string& config_key) {
  return str(config_key.empty() ? "data" : config_key, " file '", clip(path), "'");
}

std::string dtype_of(hid_t dataset, const std::string& where) {
  h5::Handle type(HPCTRAIN_H5(H5Dget_type(dataset), where), H5Tclose);
  return h5::type_name(type.get());
}

SortedRequest sort_request(const std::vector<std::int64_t>& indices, std::int64_t num_samples,
                           const std::string& where) {
  SortedRequest request;
  const auto n = static_cast<std::int64_t>(indices.size());
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t index = indices[static_cast<std::size_t>(k)];
    if (index < 0 || index >= num_samples) {
      throw DataError(str(where, ": sample index ", index, " (position ", k,
                          " of the request) is outside [0, ", num_samples,
                          "): the sampler and the file disagree on the sample count"));
    }
  }
  request.identity = std::is_sorted(indices.begin(), indices.end()) &&
                     std::adjacent_find(indices.begin(), indices.end()) == indices.end();
  if (request.identity) {
    request.unique = indices;
  } else {
    std::vector<std::int64_t> order(indices.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return indices[static_cast<std::size_t>(a)] < indices[static_cast<std::size_t>(b)];
    });
    request.row_of_request.resize(indices.size());
    for (std::int64_t k : order) {
      const std::int64_t index = indices[static_cast<std::size_t>(k)];
      if (request.unique.empty() || request.unique.back() != index) request.unique.push_back(index);
      request.row_of_request[static_cast<std::size_t>(k)] =
          static_cast<std::int64_t>(request.unique.size()) - 1;
    }
  }
  for (std::int64_t index : request.unique) {
    if (!request.runs.empty() && request.runs.back().start + request.runs.back().count == index) {
      ++request.runs.back().count;
    } else {
      request.runs.push_back({index, 1});
    }
  }
  return request;
}

void select_rows(hid_t space, const std::vector<Run>& blocks, const std::vector<std::int64_t>& dims,
                 const std::string& where) {
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> count(dims.begin(), dims.end());
  if (blocks.empty()) {
    HPCTRAIN_H5(H5Sselect_none(space), where);
    return;
  }
  bool first = true;
  for (const Run& block : blocks) {
    start[0] = static_cast<hsize_t>(block.start);
    count[0] = static_cast<hsize_t>(block.count);
    HPCTRAIN_H5(H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(),
                                    nullptr, count.data(), nullptr),
                where);
    first = false;
  }
}

void read_runs(hid_t dataset, hid_t file_space, const std::vector<std::int64_t>& dims,
               const std::vector<Run>& runs, hid_t mem_type, void* buffer,
               const std::string& where) {
  std::int64_t rows = 0;
  for (const Run& run : runs) rows += run.count;
  if (rows == 0) return;
  std::vector<hsize_t> mem_dims(dims.begin(), dims.end());
  mem_dims[0] = static_cast<hsize_t>(rows);
  h5::Handle mem_space(
      HPCTRAIN_H5(H5Screate_simple(static_cast<int>(mem_dims.size()), mem_dims.data(), nullptr),
                  where),
      H5Sclose);
  std::vector<hsize_t> start(dims.size(), 0);
  std::vector<hsize_t> count(mem_dims);
  std::vector<hsize_t> mem_start(dims.size(), 0);
  std::int64_t row = 0;
  for (const Run& run : runs) {
    start[0] = static_cast<hsize_t>(run.start);
    count[0] = static_cast<hsize_t>(run.count);
    mem_start[0] = static_cast<hsize_t>(row);
    HPCTRAIN_H5(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start.data(), nullptr, count.data(),
                                    nullptr),
                where);
    HPCTRAIN_H5(H5Sselect_hyperslab(mem_space.get(), H5S_SELECT_SET, mem_start.data(), nullptr,
                                    count.data(), nullptr),
                where);
    HPCTRAIN_H5(H5Dread(dataset, mem_type, mem_space.get(), file_space, H5P_DEFAULT, buffer),
                where);
    row += run.count;
  }
}

h5::Handle open_cached(hid_t file, const char* name, std::int64_t element_bytes,
                       const ReadOptions& options, const std::string& where, DatasetInfo& info) {
  // The chunk cache is a property of the open dataset, so look at the layout first and reopen.
  std::vector<std::int64_t> dims, chunk;
  {
    h5::Handle probe(HPCTRAIN_H5(H5Dopen2(file, name, H5P_DEFAULT), where), H5Dclose);
    dims = h5::dataset_dims(probe.get(), where);
    chunk = h5::chunk_dims(probe.get(), where);
  }
  info.chunk_shape = chunk;
  info.chunk_cache_bytes = 0;
  if (chunk.empty()) {
    return h5::Handle(HPCTRAIN_H5(H5Dopen2(file, name, H5P_DEFAULT), where), H5Dclose);
  }
  auto product = [](const std::vector<std::int64_t>& v) {
    return std::accumulate(
        v.begin(), v.end(), std::uint64_t{1},
        [](std::uint64_t a, std::int64_t b) { return a * std::max<std::int64_t>(b, 1); });
  };
  const std::uint64_t chunk_bytes = product(chunk) * static_cast<std::uint64_t>(element_bytes);
  const std::uint64_t data_bytes = product(dims) * static_cast<std::uint64_t>(element_bytes);
  std::uint64_t cache = options.chunk_cache_bytes;
  if (cache == 0) cache = std::min(data_bytes, kAutoCacheLimit);
  // A chunk larger than the cache bypasses it entirely: every sample would re-read its chunk.
  cache = std::max(cache, chunk_bytes);
  // HDF5 advises ~100 hash slots per chunk that fits, prime, to keep collisions rare.
  const std::uint64_t chunks_in_cache = (cache + chunk_bytes - 1) / chunk_bytes;
  const std::uint64_t slots =
      next_prime(std::clamp<std::uint64_t>(100 * chunks_in_cache, 521, 1u << 24));
  h5::Handle dapl(HPCTRAIN_H5(H5Pcreate(H5P_DATASET_ACCESS), where), H5Pclose);
  HPCTRAIN_H5(H5Pset_chunk_cache(dapl.get(), slots, cache, 0.75), where);
  info.chunk_cache_bytes = cache;
  return h5::Handle(HPCTRAIN_H5(H5Dopen2(file, name, dapl.get()), where), H5Dclose);
}

std::optional<double> number_attr(hid_t dataset, hid_t root, const char* name,
                                  const std::string& where) {
  if (auto value = h5::read_number_attr(dataset, name, where)) return value;
  return h5::read_number_attr(root, name, where);
}

}  // namespace detail

Batch Dataset::read_range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> indices(
      static_cast<std::size_t>(std::max<std::int64_t>(0, end - begin)));
  std::iota(indices.begin(), indices.end(), begin);
  return read(indices);
}

std::unique_ptr<Dataset> detail::open_file(const std::string& path,
                                           const DatasetExpectation& expect,
                                           const ReadOptions& options) {
  auto hold = lock_hdf5();
  h5::silence_errors();
  const std::string label = detail::file_label(path, expect.config_key);
  // "data.train" is a config key; "--file" a command-line option.
  const bool option = expect.config_key.rfind("--", 0) == 0;
  const std::string fix_path = expect.config_key.empty() ? "check the path"
                               : option                  ? str("check ", expect.config_key)
                                        : str("check ", expect.config_key, " in the config");
  struct stat st {};
  if (path.empty()) {
    throw DataError(str(label, ": no file given: ",
                        expect.config_key.empty() ? "pass a path" : "set " + expect.config_key,
                        " (hpctrain prepare writes dataset files; see docs/DATA.md)"));
  }
  if (::stat(path.c_str(), &st) != 0) {
    throw DataError(str(label, " does not exist: ", fix_path,
                        ", or create it with `hpctrain prepare` (see docs/DATA.md)"));
  }
  const runtime::PathType type = runtime::path_type(path);
  if (type == runtime::PathType::kDirectory) {
    throw DataError(str(label, " is a directory, expected an HDF5 file such as ", path,
                        "/train.h5 (a directory as data holds *.h5 or *.hdf5 files): ", fix_path));
  }
  if (type != runtime::PathType::kRegular) {
    // Opening a FIFO blocks until a writer appears, and a device or socket is no dataset.
    throw DataError(str(label, " is not a regular file (", runtime::path_type_name(type),
                        "): a dataset is an HDF5 file; ", fix_path));
  }
  if (::access(path.c_str(), R_OK) != 0) {
    throw DataError(str(label, " cannot be read (", std::strerror(errno),
                        "): check its permissions for the user the job runs as"));
  }
  htri_t is_hdf5 = H5Fis_hdf5(path.c_str());
  if (is_hdf5 <= 0) {
    std::string detail = h5::take_error_detail();
    throw DataError(str(label, " is not an HDF5 file (", st.st_size, " bytes, starting with '",
                        detail::first_bytes(path), "'",
                        is_hdf5 < 0 && !detail.empty() ? "; HDF5: " + detail : std::string(),
                        "): dataset files are HDF5 files written by `hpctrain prepare` or h5py "
                        "in the layout of docs/DATA.md"));
  }
  hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (id < 0) {
    std::string detail = h5::take_error_detail();
    throw DataError(str(label, " cannot be opened: ", detail,
                        ": check its permissions; on file systems without locking set "
                        "HDF5_USE_FILE_LOCKING=FALSE"));
  }
  h5::Handle file(id, H5Fclose);

  if (auto version = h5::read_number_attr(file.get(), "schema_version", label)) {
    if (*version > detail::kSchemaVersion || *version < 1) {
      throw DataError(str(label, ": schema_version ", *version,
                          " is not supported (this hpctrain "
                          "reads schema version 1..",
                          detail::kSchemaVersion,
                          "): use a newer hpctrain or prepare the file again with this one"));
    }
  }
  const bool has_tokens = h5::exists(file.get(), "tokens");
  const bool has_inputs = h5::exists(file.get(), "inputs");
  const bool has_labels = h5::exists(file.get(), "labels");
  const bool has_targets = h5::exists(file.get(), "targets");
  if (has_labels && has_targets) {
    throw DataError(str(label,
                        " holds both /labels (classification) and /targets (regression): a file "
                        "holds one kind; keep the one the model is trained on"));
  }
  if (has_tokens && (has_inputs || has_labels || has_targets)) {
    throw DataError(str(label,
                        " holds both /tokens (language modelling) and /inputs or /labels "
                        "(classification): a file holds one kind; split it into two files"));
  }
  if (has_tokens) return detail::open_tokens(std::move(file), path, expect, options);
  if (has_targets) {
    if (!has_inputs) {
      throw DataError(str(label,
                          ": missing dataset /inputs: a regression file needs /inputs (N x ..., "
                          "float32) and /targets (N x ..., float32); found ",
                          detail::root_objects(file.get()), " (layout in docs/DATA.md)"));
    }
    return detail::open_regression(std::move(file), path, expect, options);
  }
  if (has_inputs || has_labels) {
    const char* missing = has_inputs ? "/labels" : "/inputs";
    if (!(has_inputs && has_labels)) {
      throw DataError(str(label, ": missing dataset ", missing,
                          ": a classification file needs /inputs (N x ...) and /labels (N, "
                          "int64); found ",
                          detail::root_objects(file.get()), " (layout in docs/DATA.md)"));
    }
    return detail::open_classification(std::move(file), path, expect, options);
  }
  throw DataError(str(label,
                      ": expected datasets /inputs and /labels (classification), /inputs and "
                      "/targets (regression) or /tokens (language modelling), found ",
                      detail::root_objects(file.get()),
                      ": write the file in the layout of docs/DATA.md (hpctrain prepare does)"));
}

}  // namespace hpctrain::data
