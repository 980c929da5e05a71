#include "hpctrain/data/train_loader.hpp"

namespace hpctrain::data {

TrainLoader::TrainLoader(Dataset& dataset, const TrainSampler& sampler, const SamplerState& start,
                         int dp_rank, int dp_size, int prefetch, std::int64_t end_step)
    : sampler_(sampler), state_(start), end_step_(end_step) {
  // Validate the slice and the state here, in the caller's thread, so a mismatch is reported
  // before any batch is read ahead.
  TrainSampler::rank_slice(
      std::vector<std::int64_t>(static_cast<std::size_t>(sampler.global_batch())), dp_rank,
      dp_size);
  SamplerState probe = start;
  sampler_.advance(probe);

  // The producer owns its own sampler copy and state, running ahead of state_; both advance
  // deterministically, so they describe the same stream.
  auto producer = [&dataset, sampler, state = start, dp_rank, dp_size, end_step](
                      std::int64_t, Batch& out) mutable {
    if (end_step >= 0 && state.global_step >= end_step) return false;
    const auto global = sampler.next_global_batch(state);
    out = dataset.read(TrainSampler::rank_slice(global, dp_rank, dp_size));
    return true;
  };
  prefetcher_ = std::make_unique<Prefetcher>(std::move(producer), prefetch);
}

bool TrainLoader::next(Batch& out) {
  if (!prefetcher_->next(out)) return false;
  sampler_.advance(state_);
  return true;
}

}  // namespace hpctrain::data
