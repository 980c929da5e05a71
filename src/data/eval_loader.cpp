#include "hpctrain/data/eval_loader.hpp"

namespace hpctrain::data {

EvalLoader::EvalLoader(Dataset& dataset, const EvalShard& shard, int prefetch) : shard_(shard) {
  auto producer = [&dataset, shard](std::int64_t i, Batch& out) {
    if (i >= shard.num_batches()) return false;
    out = dataset.read_range(shard.batch_begin(i), shard.batch_begin(i) + shard.batch_size(i));
    return true;
  };
  prefetcher_ = std::make_unique<Prefetcher>(std::move(producer), prefetch);
}

}  // namespace hpctrain::data
