#pragma once
// Which part of the flat buffers this data-parallel rank owns when the optimizer state is sharded
// (parallel.shard_optimizer, ZeRO stage 1): every gradient bucket (padded to a multiple of the dp
// size by FlatLayout) splits into dp equal chunks, and dp rank r owns chunk r of each. The bucket
// reduce-scatter leaves the averaged gradient of exactly those chunks; the optimizer updates only
// them and keeps its state (moments, momentum) for them alone, packed one chunk after another;
// the updated parameters are then all-gathered bucket by bucket, in forward order (the bucket of
// the first layers first): start_parameter_gather() launches them, and a model that waits layer by
// layer (model::Model::waits_for_parameters) calls wait_parameter() for each parameter just
// before its first use, so the next step's forward overlaps the rest of the gather. Checkpoints
// still store logical tensors: gather_state() builds the full state for a save, scatter_state()
// takes a rank's chunks back out of a loaded one, so a checkpoint does not depend on the dp size or
// on sharding.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/parallel/flat_parameters.hpp"

namespace hpctrain::parallel {

/// A range of elements of the flat buffers.
struct FlatRange {
  std::int64_t offset = 0;
  std::int64_t numel = 0;
};

class DataParallelShards {
 public:
  /// `bucket_offsets` and `bucket_sizes`: the synchronizer's buckets, each size a multiple of
  /// dp->size() (throws Error otherwise). Local.
  DataParallelShards(FlatParameters& flat, const std::vector<std::int64_t>& bucket_offsets,
                     const std::vector<std::int64_t>& bucket_sizes,
                     std::shared_ptr<comm::Communicator> dp);

  /// This rank's chunk of every bucket, in flat order. Local.
  const std::vector<FlatRange>& owned() const { return owned_; }
  /// Elements owned in all (the length of the packed optimizer state). Local.
  std::int64_t owned_numel() const { return owned_numel_; }
  /// Sum of squares of the owned gradient elements, in double; elements of the flat entries in
  /// `weighted` count `weight` times instead of once (tensor-parallel replicas). Local.
  double owned_grad_square_sum(const std::vector<std::size_t>& weighted, double weight) const;
  /// Sum of squares of the owned elements of flat entry `index`'s gradient, in double. Local.
  double owned_entry_square_sum(std::size_t index) const;
  /// Multiplies the owned gradient elements by `factor` (clipping). Local.
  void scale_owned_grads(double factor);
  /// Launches the all-gather of every bucket, last bucket (the first layers' parameters) first,
  /// without waiting (on the dp group's communication thread or stream; at once where that has
  /// none). Collective over the dp group: every dp rank starts it after the same update.
  void start_parameter_gather();
  /// Waits for the gathers of the buckets holding parameter `parameter` (a view into the flat
  /// parameters; any other tensor waits for every bucket), traced as a "parameter gather wait".
  /// Local (completes collectives already started).
  void wait_parameter(const torch::Tensor& parameter);
  /// Waits for every gather still in flight; returns the seconds waited. Call before anything but
  /// forward reads the parameters. Local.
  double wait_parameters();
  /// Whether a gather started by start_parameter_gather() may still be in flight. Local.
  bool gather_pending() const { return pending_ > 0; }
  /// The full flat-layout tensor (flat.numel() elements, padding zero) of packed state `packed`
  /// (owned_numel() elements): every rank's chunks gathered. Collective over the dp group.
  torch::Tensor gather_state(const torch::Tensor& packed);
  /// Copies this rank's chunks of the flat-layout tensor `full` into `packed`. Local.
  void scatter_state(const torch::Tensor& full, torch::Tensor& packed) const;

 private:
  /// Launches the in-place all-gather of every bucket of `flat_tensor` (flat layout, flat_.numel()
  /// elements), last bucket first; the handles are indexed by bucket. Collective over the dp group.
  std::vector<comm::WorkHandle> launch_bucket_gathers(const torch::Tensor& flat_tensor);

  FlatParameters& flat_;
  std::shared_ptr<comm::Communicator> dp_;
  std::vector<FlatRange> buckets_;
  std::vector<comm::WorkHandle> gathers_;  // per bucket: in flight, or null
  std::size_t pending_ = 0;                // non-null entries of gathers_
  std::vector<FlatRange> owned_;
  std::int64_t owned_numel_ = 0;
};

}  // namespace hpctrain::parallel
