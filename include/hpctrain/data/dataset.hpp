#pragma once
// An HDF5 dataset file (one per split; format in docs/DATA.md), opened once per rank and read by
// global sample index. Classification files hold /inputs (N x ...) and /labels (N); regression
// files /inputs and float32 /targets (N x ...); language modelling files hold /tokens (a 1-D
// stream) whose samples are windows of seq_len + 1 tokens.
// A Dataset is used by one thread at a time (the Prefetcher's, usually); every HDF5 call it makes
// holds hdf5_mutex() (hdf5_lock.hpp), so other threads may use HDF5 meanwhile if they hold it too.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/data/sampler.hpp"
#include "hpctrain/runtime/task.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::data {

/// One file of a dataset of many files, as a checkpoint records it. Local value type.
struct DataFileRecord {
  std::string path;  ///< as expanded from the config
  /// The path below the pattern's directory (a glob's or directory's), or the file name of a
  /// listed file: what a resume compares, so a dataset moved elsewhere still matches.
  std::string name;
  std::int64_t num_samples = 0;
  /// FNV-1a (64 bits, hex) of the file's size and what validation found (kind, shapes, dtypes,
  /// scale, classes, vocabulary, tokens): changes when the content's layout changes.
  std::string checksum;
};

/// What a file holds: the task a model trained on it learns (task_name() says it in words).
using DatasetKind = Task;

/// What a file holds, validated on open. Local value type.
struct DatasetInfo {
  std::string path;
  DatasetKind kind = DatasetKind::kClassification;
  std::int64_t num_samples = 0;
  /// Classification, regression: shape of one input (e.g. {1, 28, 28}); language modelling:
  /// {seq_len}.
  std::vector<std::int64_t> sample_shape;
  /// Regression: shape of one target row (empty for one scalar per sample).
  std::vector<std::int64_t> target_shape;
  std::string input_dtype;       ///< "uint8", "float32", "int32", "uint16"
  double input_scale = 1.0;      ///< uint8 inputs are multiplied by this (1/255 for images)
  std::int64_t num_classes = 0;  ///< classification
  std::int64_t vocab_size = 0;   ///< language modelling
  std::int64_t seq_len = 0;      ///< language modelling
  std::int64_t num_tokens = 0;   ///< language modelling
  /// Bytes of one sample as stored in the file (inputs row, or seq_len + 1 tokens). For MB/s.
  std::int64_t sample_bytes = 0;
  /// Chunk shape of /inputs or /tokens (empty when the dataset is contiguous).
  std::vector<std::int64_t> chunk_shape;
  /// Bytes of chunk cache the reader gave /inputs or /tokens (0 for contiguous datasets).
  std::uint64_t chunk_cache_bytes = 0;
  /// Labels of files with at most this many samples are read once at open and kept in memory
  /// (8 bytes each); larger files read labels with each batch.
  std::int64_t max_labels_in_memory = std::int64_t{1} << 23;
  /// Classification: num_classes came from the file's attribute (not from its largest label).
  bool classes_declared = false;
  /// A dataset of many files (a list, glob or directory; docs/DATA.md): the files in index
  /// order, sample index spans them in this order. One entry for a single file.
  std::vector<DataFileRecord> files;
  /// A weighted mixture: its sources, each a range of the global index (empty otherwise).
  std::vector<SamplerSource> sources;
};

/// What the run expects of a file; checked on open so a mismatch is a DataError before training.
struct DatasetExpectation {
  std::int64_t seq_len = 0;      ///< required for language modelling files
  std::int64_t min_samples = 0;  ///< e.g. one global batch for training
  std::int64_t num_classes = 0;  ///< 0 = take the file's
  std::int64_t vocab_size = 0;   ///< 0 = take the file's
  /// The config key the path came from ("data.train"), named in messages; empty = none.
  std::string config_key;
};

/// How the reader uses the file. Local value type.
struct ReadOptions {
  /// Chunk cache for /inputs or /tokens in bytes; 0 = automatic: the whole dataset up to
  /// 256 MiB (so a dataset like Fashion-MNIST is read from disk once per run), never less than
  /// one chunk.
  std::uint64_t chunk_cache_bytes = 0;
  /// Labels of files with at most this many samples are read once at open and kept in memory
  /// (8 bytes each); larger files read labels with each batch.
  std::int64_t max_labels_in_memory = std::int64_t{1} << 23;
  /// The file was validated already in this run (on this or another rank): skip the range scans
  /// of labels and tokens. Internal to datasets of many files.
  bool trusted = false;
  /// Datasets of many files: at most this many files are open at once (least recently read
  /// closed first).
  int max_open_files = 128;
};

/// One batch as tensors on the CPU. inputs: float32 [B, sample_shape...] for classification and
/// regression, int64 [B, seq_len] for language modelling; targets: int64 [B], float32
/// [B, target_shape...] (regression) or int64 [B, seq_len].
struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  /// The global sample index of each row (filled by Dataset::read).
  std::vector<std::int64_t> indices;
  /// On a GPU with a copy stream: inputs and targets are already device tensors whose copy may
  /// still run; comm::DeviceCopier::wait(ready) orders the compute stream after it. Null
  /// otherwise.
  std::shared_ptr<void> ready;
  std::int64_t size() const { return targets.defined() ? targets.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Opens and validates `path` (datasets present, ranks, dtypes, attributes, sizes, label or
  /// token ranges). Throws DataError naming the file, the dataset, what was expected and found.
  /// Local (each rank opens its own handle; nothing is read beyond metadata and range checks):
  /// every rank calls it before any collective so every rank reports a bad file itself.
  /// Range checks scan /labels or /tokens once, in blocks (Fashion-MNIST: ~1 ms).
  /// `path` may also be a glob (`data/shard-*.h5`), a directory (its *.h5 and *.hdf5 files), or a
  /// YAML list (text starting with '[', as DataConfig stores a list): of paths and globs, or of
  /// sources `{path: ..., weight: ..., name: ...}` (a weighted mixture). Many files are one
  /// dataset whose global index spans them in name order; every file is validated, and all must
  /// agree in kind, shapes, dtypes, scale, classes and vocabulary. With a `group`, its ranks
  /// split the validation of the files among them and share the results: collective over the
  /// group (every rank gets the same result or the same error); without one, local.
  static std::unique_ptr<Dataset> open(const std::string& path,
                                       const DatasetExpectation& expect = {},
                                       const ReadOptions& options = {},
                                       comm::ControlPlane* group = nullptr);
  virtual const DatasetInfo& info() const = 0;
  /// Reads the samples with these global indices (any order; duplicates allowed) into a Batch in
  /// the same order, with hyperslab selections that coalesce neighbours. Throws DataError for an
  /// index outside [0, num_samples). Local; one thread at a time.
  virtual Batch read(const std::vector<std::int64_t>& indices) = 0;
  /// Global indices [begin, end) in order (evaluation): the same as read() of that range; the
  /// file readers do it with one hyperslab. Local; one thread at a time.
  virtual Batch read_range(std::int64_t begin, std::int64_t end);
};

}  // namespace hpctrain::data
