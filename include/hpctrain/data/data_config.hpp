#pragma once
// The `data` section of the run configuration (keys documented in docs/DATA.md, "Configuration").

#include <cstdint>
#include <string>

#include "hpctrain/data/dataset.hpp"

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::data {

struct DataConfig {
  /// data.train: training split: a file, glob or directory, or a list of them or of weighted
  /// sources, the list as one line of YAML flow text (what Dataset::open takes); "" = none given
  std::string train;
  std::string val;  ///< data.val: validation split, the same forms ("" = none)
  /// data.allow_changed_files: resume although the training files differ from the checkpoint's
  bool allow_changed_files = false;
  std::int64_t batch_size = 64;   ///< data.batch_size: samples per data-parallel rank per step
  bool shuffle = true;            ///< data.shuffle: permute each epoch (else sequential)
  int prefetch = 4;               ///< data.prefetch: batches read ahead (0 = read inline)
  std::uint64_t chunk_cache = 0;  ///< data.chunk_cache: bytes, 0 = "auto" (see ReadOptions)
  /// data.tokenizer: the tokenizer the run's token files were made with, as load_tokenizer
  /// (tokenizer.hpp) takes it: "bytes", a tokenizer.json, a folder or a .tiktoken file; generation
  /// and evaluation decode with it
  std::string tokenizer = "bytes";

  /// Reads and validates the keys of `data_section` (recording defaults); throws ConfigError
  /// naming the key ("data.batch_size = 0: must be at least 1"). Local: every rank reads the
  /// same config identically.
  static DataConfig from(ConfigSection& data_section);

  /// The reader options these keys ask for. Local.
  ReadOptions read_options() const;
};

}  // namespace hpctrain::data
