#include "hpctrain/data/data_config.hpp"

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {

DataConfig DataConfig::from(ConfigSection& data) {
  DataConfig config;
  // A path, glob or directory, or a list of them or of weighted sources (Dataset::open).
  config.train = data.get_text_or_list("train", config.train);
  config.val = data.get_text_or_list("val", config.val);
  config.allow_changed_files = data.get<bool>("allow_changed_files", config.allow_changed_files);
  config.batch_size = data.get<std::int64_t>("batch_size", config.batch_size);
  if (config.batch_size < 1) {
    data.fail("batch_size", "must be at least 1 (samples per data-parallel rank per step)");
  }
  config.shuffle = data.get<bool>("shuffle", config.shuffle);
  config.prefetch = data.get<int>("prefetch", config.prefetch);
  if (config.prefetch < 0) {
    data.fail("prefetch", "must be 0 (read inline) or more (batches read ahead)");
  }
  const std::string cache = data.get<std::string>("chunk_cache", "auto");
  if (cache != "auto") {
    config.chunk_cache = parse_bytes(cache, data.full_key("chunk_cache"));  // positive
  }
  config.tokenizer = data.get<std::string>("tokenizer", config.tokenizer);
  if (config.tokenizer != "bytes") {
    // The path's type only (stat): loading a large vocabulary is left to the commands that decode.
    const runtime::PathType type = runtime::path_type(config.tokenizer);
    if (type != runtime::PathType::kRegular && type != runtime::PathType::kDirectory) {
      data.fail("tokenizer", str("is ", runtime::path_type_name(type),
                                 ": give bytes, a tokenizer.json, a folder holding one (or GPT-2's "
                                 "encoder.json + vocab.bpe) or a .tiktoken file (docs/DATA.md)"));
    }
  }
  return config;
}

ReadOptions DataConfig::read_options() const {
  ReadOptions options;
  options.chunk_cache_bytes = chunk_cache;
  return options;
}

}  // namespace hpctrain::data
