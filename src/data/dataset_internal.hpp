#pragma once
// Private to the data layer: what the classification and token readers share (file naming in
// messages, request sorting and coalescing, chunk cache set-up, run-by-run hyperslab reads).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/hdf5_util.hpp"

namespace hpctrain::data::detail {

/// The current schema version written into files (attribute schema_version).
constexpr std::int64_t kSchemaVersion = 1;

/// Labels and token ids are checked against their bounds this many values per read.
constexpr std::int64_t kScanBlock = std::int64_t{1} << 20;

/// "data.train file '/p/train.h5'" or "data file '/p/train.h5'". Local.
std::string file_label(const std::string& path, const std::string& config_key);

/// Throws DataError naming `where` (file and dataset) and its shape when a sample of a dataset of
/// shape `dims` (N x sample dims) holds no values (a zero sample dimension): nothing could be
/// learnt from it, and reductions over it fail. Local.
void require_sample_values(const std::string& where, const std::vector<std::int64_t>& dims);

/// The element type of `dataset` by name ("uint8", "float32", ...: h5::type_name); throws DataError
/// naming `where` when HDF5 cannot tell. Local.
std::string dtype_of(hid_t dataset, const std::string& where);

/// A run of consecutive sample indices [start, start + count).
struct Run {
  std::int64_t start = 0;
  std::int64_t count = 0;
};

/// A request reordered for reading: the distinct indices ascending (one row each in the read
/// buffer), the runs they form, and for every requested index its row among `unique`.
struct SortedRequest {
  std::vector<std::int64_t> unique;
  std::vector<Run> runs;
  std::vector<std::int64_t> row_of_request;
  bool identity = false;  ///< the request was already ascending without duplicates
};

/// Sorts and coalesces `indices`; throws DataError naming `where` for an index outside
/// [0, num_samples). Local.
SortedRequest sort_request(const std::vector<std::int64_t>& indices, std::int64_t num_samples,
                           const std::string& where);

/// Selects the union of `blocks` (start along dim 0, count along dim 0; the other dims whole) in
/// `space` of extent `dims`. Local.
void select_rows(hid_t space, const std::vector<Run>& blocks, const std::vector<std::int64_t>& dims,
                 const std::string& where);

/// Reads rows `runs` of `dataset` (extent `dims`, dataspace `file_space`) into `buffer`, run after
/// run, as `mem_type`. One H5Dread per run with a single-block hyperslab on each side: HDF5 1.10
/// maps a single block to its chunks block-wise, but walks an irregular union of blocks element
/// by element (50x slower for a batch of 64 images). Local.
void read_runs(hid_t dataset, hid_t file_space, const std::vector<std::int64_t>& dims,
               const std::vector<Run>& runs, hid_t mem_type, void* buffer,
               const std::string& where);

/// Opens `name` with a chunk cache sized for random access by sample (see ReadOptions), and
/// records the chunk shape and cache size into `info`. Local.
h5::Handle open_cached(hid_t file, const char* name, std::int64_t element_bytes,
                       const ReadOptions& options, const std::string& where, DatasetInfo& info);

/// The first value of attribute `name` found on `dataset`, then on the file's root group. Local.
std::optional<double> number_attr(hid_t dataset, hid_t root, const char* name,
                                  const std::string& where);

/// One HDF5 file, validated (Dataset::open of a plain path). Local.
std::unique_ptr<Dataset> open_file(const std::string& path, const DatasetExpectation& expect,
                                   const ReadOptions& options);

/// FNV-1a of what validation found in a file and its size (DataFileRecord::checksum). Local.
std::string metadata_checksum(const DatasetInfo& info);

std::unique_ptr<Dataset> open_classification(h5::Handle file, const std::string& path,
                                             const DatasetExpectation& expect,
                                             const ReadOptions& options);
std::unique_ptr<Dataset> open_regression(h5::Handle file, const std::string& path,
                                         const DatasetExpectation& expect,
                                         const ReadOptions& options);
std::unique_ptr<Dataset> open_tokens(h5::Handle file, const std::string& path,
                                     const DatasetExpectation& expect, const ReadOptions& options);

}  // namespace hpctrain::data::detail
