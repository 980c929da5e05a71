#include "hpctrain/data/train_loader.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {

TrainLoader::TrainLoader(Dataset& dataset, const TrainSampler& sampler, const SamplerState& start,
                         int dp_rank, int dp_size, int prefetch, std::int64_t end_step,
                         int micro_batches, InputStaging staging,
                         std::shared_ptr<comm::DeviceCopier> copier)
    : sampler_(sampler), state_(start), end_step_(end_step), micro_batches_(micro_batches) {
  // Validate the slice and the state here, in the caller's thread, so a mismatch is reported
  // before any batch is read ahead.
  const auto slice_size =
      TrainSampler::rank_slice(
          std::vector<std::int64_t>(static_cast<std::size_t>(sampler.global_batch())), dp_rank,
          dp_size)
          .size();
  if (micro_batches < 1 || slice_size % static_cast<std::size_t>(micro_batches) != 0) {
    throw DataError(str("a rank's slice of ", slice_size, " samples does not split into ",
                        micro_batches, " micro-batches (internal error)"));
  }
  const std::size_t micro = slice_size / static_cast<std::size_t>(micro_batches);
  SamplerState probe = start;
  sampler_.advance(probe);

  // The producer owns its own sampler copy and state, running ahead of state_; both advance
  // deterministically, so they describe the same stream.
  auto producer = [&dataset, sampler, state = start, dp_rank, dp_size, end_step, micro_batches,
                   micro, staging, copier,
                   slice = std::vector<std::int64_t>()](std::int64_t i, Batch& out) mutable {
    const int k = static_cast<int>(i % micro_batches);
    if (k == 0) {
      if (end_step >= 0 && state.global_step >= end_step) return false;
      slice = TrainSampler::rank_slice(sampler.next_global_batch(state), dp_rank, dp_size);
    }
    if (micro_batches == 1) {
      out = dataset.read(slice);
    } else {
      const auto first = slice.begin() + static_cast<std::ptrdiff_t>(k * micro);
      out = dataset.read(
          std::vector<std::int64_t>(first, first + static_cast<std::ptrdiff_t>(micro)));
    }
    if (staging == InputStaging::kPinned) {
      out.inputs = out.inputs.pin_memory();
      out.targets = out.targets.pin_memory();
      if (copier) {  // the copy runs while the device computes the steps before this one
        out.inputs = copier->start(out.inputs);
        out.targets = copier->start(out.targets);
        out.ready = copier->ready();
      }
    } else if (staging == InputStaging::kCopy) {
      out.inputs = out.inputs.clone(at::MemoryFormat::Contiguous);
      out.targets = out.targets.clone(at::MemoryFormat::Contiguous);
    }
    return true;
  };
  prefetcher_ = std::make_unique<Prefetcher>(std::move(producer), prefetch);
}

bool TrainLoader::next_step(std::vector<Batch>& micro) {
  micro.resize(static_cast<std::size_t>(micro_batches_));
  for (int k = 0; k < micro_batches_; ++k) {
    if (!prefetcher_->next(micro[static_cast<std::size_t>(k)])) {
      if (k == 0) return false;
      throw DataError("the training data stream ended inside a step (internal error)");
    }
  }
  sampler_.advance(state_);
  return true;
}

bool TrainLoader::next(Batch& out) {
  if (!prefetcher_->next(out)) return false;
  sampler_.advance(state_);
  return true;
}

}  // namespace hpctrain::data
