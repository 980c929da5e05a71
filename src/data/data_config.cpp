#include "hpctrain/data/data_config.hpp"

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {

DataConfig DataConfig::from(ConfigSection& data) {
  DataConfig config;
  config.train = data.get<std::string>("train", config.train);
  config.val = data.get<std::string>("val", config.val);
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
    config.chunk_cache = parse_bytes(cache, data.full_key("chunk_cache"));
    if (config.chunk_cache == 0) {
      data.fail("chunk_cache", "must be 'auto' or a size such as 64M");
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
