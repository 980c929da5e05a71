#pragma once
// This rank's training batches: the global sampler (sampler.hpp) sliced for this data-parallel
// rank, optionally split into micro-batches for gradient accumulation, read from a Dataset by a
// Prefetcher ahead of the training loop. Tensor-parallel ranks of one data-parallel group pass the
// same dp_rank and so read the same samples.

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/comm/device_copy.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/prefetcher.hpp"
#include "hpctrain/data/sampler.hpp"

namespace hpctrain::data {

/// How the reader thread hands a batch over to the training step.
enum class InputStaging {
  kNone,    ///< as read
  kPinned,  ///< in page-locked host memory (training on a GPU): the step's non-blocking copy to
            ///< the device is a DMA that does not wait for the host
  kCopy,    ///< in a fresh host buffer: the pinned path's hand-over where page-locked memory is
            ///< unavailable (CPU-only LibTorch); `debug.stage_inputs` exercises it in tests
};

class TrainLoader {
 public:
  /// Starts reading this rank's slices of the global batches that follow `start`, `prefetch`
  /// batches ahead (0 = read inside next()). Stops after global step `end_step` (-1 = never).
  /// `dataset` must outlive the loader. Local.
  /// With `micro_batches` K > 1 each rank slice is read as K consecutive micro-batches (its
  /// length must divide by K); `prefetch` counts micro-batches. `staging`: how the reader thread
  /// hands batches over (InputStaging); with kPinned and a `copier`, the reader thread also
  /// starts each batch's copy to the GPU on the copier's stream (Batch::ready).
  TrainLoader(Dataset& dataset, const TrainSampler& sampler, const SamplerState& start, int dp_rank,
              int dp_size, int prefetch, std::int64_t end_step = -1, int micro_batches = 1,
              InputStaging staging = InputStaging::kNone,
              std::shared_ptr<comm::DeviceCopier> copier = nullptr);

  /// The next batch of this rank; false once end_step is reached. Rethrows reader errors. Local;
  /// with micro-batches use next_step().
  bool next(Batch& out);
  /// The K micro-batches of this rank's next step (K = 1: its batch); false once end_step is
  /// reached. Rethrows reader errors. Local.
  bool next_step(std::vector<Batch>& micro);
  /// The stream position after the batches next() returned (not the ones read ahead): what a
  /// checkpoint saves. Local.
  const SamplerState& state() const { return state_; }
  /// Seconds next() waited for data so far. Local.
  double wait_seconds() const { return prefetcher_->wait_seconds(); }

 private:
  TrainSampler sampler_;  // the consumer's copy: only advance() is called on it
  SamplerState state_;
  std::int64_t end_step_;
  int micro_batches_;
  std::unique_ptr<Prefetcher> prefetcher_;
};

}  // namespace hpctrain::data
