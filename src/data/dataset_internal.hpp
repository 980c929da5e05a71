#pragma once
// Private to the data layer: what the classification and token readers share (file naming in
// messages, request sorting and coalescing, chunk cache set-up, run-by-run hyperslab reads).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/hdf5_util.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

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

// What the token-stream readers (HDF5 /tokens, Megatron .bin/.idx) share.

/// The samples (windows of seq_len + 1 tokens, overlapping by one) in a stream of `num_tokens`;
/// throws DataError naming `where` when the stream does not fill one. Local.
std::int64_t token_windows(std::int64_t num_tokens, std::int64_t seq_len, const std::string& where);

/// Throws DataError naming `label` when a stream's `num_samples` windows of `seq_len` fill no
/// global batch of `min_samples` (DatasetExpectation::min_samples). Local.
void require_token_batch(const std::string& label, std::int64_t num_samples, std::int64_t seq_len,
                         std::int64_t num_tokens, std::int64_t min_samples);

/// Throws DataError naming `where` and the stream position of the first of `count` token ids
/// (the stream's from `begin`) outside [0, vocab_size); `fix` ends the message: which vocabulary
/// that is and what to change. Local.
template <typename Id>
void check_token_ids(const Id* ids, std::int64_t count, std::int64_t begin, std::int64_t vocab_size,
                     const std::string& where, const char* fix) {
  for (std::int64_t i = 0; i < count; ++i) {
    const Id token = ids[i];
    if (token < 0 || token >= vocab_size) {
      throw DataError(str(where, ": token id ", token, " at position ", begin + i,
                          " is outside the vocabulary [0, ", vocab_size, ")", fix));
    }
  }
}

/// The DatasetInfo of a language-model token stream of `num_tokens` ids of `token_bytes` each
/// (dtype `dtype`) cut into `num_samples` windows of `seq_len`. Local.
DatasetInfo token_stream_info(const std::string& path, std::int64_t num_samples,
                              std::int64_t seq_len, const std::string& dtype,
                              std::int64_t vocab_size, std::int64_t num_tokens,
                              std::int64_t token_bytes);

std::unique_ptr<Dataset> open_classification(h5::Handle file, const std::string& path,
                                             const DatasetExpectation& expect,
                                             const ReadOptions& options);
std::unique_ptr<Dataset> open_regression(h5::Handle file, const std::string& path,
                                         const DatasetExpectation& expect,
                                         const ReadOptions& options);
/// A Megatron indexed dataset PREFIX.bin + PREFIX.idx (megatron_dataset.cpp), validated: every
/// field of the index against both files' sizes, the token ids against expect.vocab_size (the
/// model's; required: the format records no vocabulary). Local.
std::unique_ptr<Dataset> open_megatron(const std::string& prefix, const DatasetExpectation& expect,
                                       const ReadOptions& options);
std::unique_ptr<Dataset> open_tokens(h5::Handle file, const std::string& path,
                                     const DatasetExpectation& expect, const ReadOptions& options);

}  // namespace hpctrain::data::detail
