#pragma once
// Data-parallel gradient synchronisation with buckets overlapped with backward. Gradients are
// grouped into buckets of about `bucket_bytes` (contiguous ranges of the flat gradient buffer,
// reverse registration order); a hook on each parameter's gradient accumulator notices when its
// gradient is final, and as soon as every gradient of a bucket is final the bucket is averaged
// over the data-parallel group asynchronously while backward continues. Buckets are launched in
// index order on every rank, so the collectives match across ranks. During the first K-1
// micro-batches of gradient accumulation synchronisation is disabled and nothing is sent.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"

namespace hpctrain::parallel {

class GradientSynchronizer {
 public:
  /// `bucket_bytes` = 0 puts every parameter in its own bucket. `overlap` false defers every
  /// all-reduce to finish() (one pass after backward). `reduce_scatter`: average each bucket
  /// with an in-place reduce-scatter instead of an all-reduce, so only this dp rank's shard of
  /// every bucket (DataParallelShards) holds the average; needs `flat` laid out with
  /// FlatLayout{bucket_bytes, dp size} (throws Error otherwise). Local; installs autograd hooks.
  GradientSynchronizer(FlatParameters& flat, std::shared_ptr<comm::Communicator> dp,
                       std::int64_t bucket_bytes, bool overlap, bool reduce_scatter = false);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  /// Whether the next backward synchronises (false for accumulation micro-batches 1..K-1). Local.
  void set_sync_enabled(bool enabled);
  /// Call before each backward that synchronises: resets bucket readiness. Local.
  void prepare();
  /// Launches buckets not launched during backward (unused parameters, overlap off) and waits for
  /// all. Returns the seconds spent waiting. Collective over the dp group.
  double finish();
  /// Number of buckets and their sizes in elements (padding included). Local.
  const std::vector<std::int64_t>& bucket_sizes() const { return bucket_numel_; }
  /// First element of each bucket in the flat buffers. Local.
  const std::vector<std::int64_t>& bucket_offsets() const { return bucket_offset_; }

  /// Called by the autograd hook of entry `index` of the flat parameters. Internal.
  void on_gradient_ready(std::size_t entry_index);

 private:
  void launch_ready_buckets();

  FlatParameters& flat_;
  std::shared_ptr<comm::Communicator> dp_;
  bool overlap_;
  bool reduce_scatter_;
  bool sync_enabled_ = true;
  std::vector<std::int64_t> bucket_offset_;
  std::vector<std::int64_t> bucket_numel_;
  std::vector<int> bucket_of_entry_;
  std::vector<int> bucket_param_count_;
  std::vector<int> pending_;
  std::vector<comm::WorkHandle> works_;
  std::size_t next_launch_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep hooks alive
  std::vector<std::uintptr_t> hook_keys_;
};

/// Copies the flat parameters of group rank 0 to every rank (every rank starts identical).
/// Collective over `group`.
void broadcast_parameters(FlatParameters& flat, comm::Communicator& group);

/// Copies the buffers of `module` (BatchNorm running statistics and the like) of group rank 0 to
/// every rank, in registration order. A no-op for a module without buffers (the built-in models).
/// Collective over `group`.
void broadcast_buffers(torch::nn::Module& module, comm::Communicator& group);

}  // namespace hpctrain::parallel
