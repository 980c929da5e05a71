#pragma once
// Flat parameter and gradient storage. Every parameter of the model becomes a view into one
// contiguous buffer, and its .grad() a view into a second one, laid out in reverse registration
// order (the order backward produces gradients). Gradient buckets are then contiguous ranges that
// can be all-reduced without packing, the optimizer updates all parameters with a handful of
// large vectorised operations, and broadcasting the initial weights is one collective.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::parallel {

/// Groups consecutive entries of `numels` (in flat order) into gradient buckets: a bucket takes
/// entries until it holds at least `bucket_bytes` (0: one entry per bucket); an entry flagged in
/// `alone` (if given) gets a bucket to itself. Returns the number of entries in each bucket.
/// Local.
std::vector<int> bucket_entry_counts(const std::vector<std::int64_t>& numels,
                                     std::int64_t element_bytes, std::int64_t bucket_bytes,
                                     const std::vector<bool>& alone = {});

/// How the flat buffers are laid out: with `shard_count` > 1 every gradient bucket (grouped by
/// bucket_entry_counts with `bucket_bytes`) is followed by zero padding up to a multiple of
/// `shard_count` elements, so it splits into equal shards for a reduce-scatter.
struct FlatLayout {
  std::int64_t bucket_bytes = 0;
  int shard_count = 1;
  /// Parameters that get a gradient bucket of their own (the copies of a parameter two pipeline
  /// stages hold: with a bucket each, a sharded optimizer's chunks of it are the same elements on
  /// both stages).
  std::vector<std::string> own_bucket;
  /// Whether the flat gradient buffer exists (every parameter's .grad a view into it). False
  /// under parallel.shard: gradients, whose reducer keeps only this rank's chunks of them.
  bool gradients = true;
};

/// The gradient buckets over a flat layout: where each starts, its length (up to the next
/// bucket's first entry: padding included) and how many entries it holds.
struct FlatBuckets {
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;
  std::vector<int> entry_counts;
};

/// Sum of squares of the float tensor `t`, accumulated in double over fixed chunks (the result
/// does not depend on the thread count); on a device, square_sum_by_rows. Local.
double square_sum(const torch::Tensor& t);
/// Sum of squares of `t` on any device without a float64 copy of it: norms of rows of 64 Ki
/// elements accumulated in float32 (float64 for a double tensor), their squares summed in float64
/// (relative error ~1e-6). The one host read is watched as the "gradient norm" host sync
/// (comm/host_value.hpp). Local.
double square_sum_by_rows(const torch::Tensor& t);

class FlatParameters {
 public:
  struct Entry {
    std::string name;     ///< state_dict name, e.g. "fc1.weight"
    torch::Tensor param;  ///< the module's parameter (now a view into params())
    std::int64_t offset;  ///< first element in the flat buffers
    std::int64_t numel;
    bool own_bucket = false;  ///< FlatLayout::own_bucket names it
  };

  /// Moves the parameters of `module` (all float32 or all of one dtype, one device) into the flat
  /// buffers, preserving their values and autograd identity. Local. Throws Error for mixed
  /// dtypes or devices.
  explicit FlatParameters(torch::nn::Module& module, FlatLayout layout = {});

  torch::Tensor& params() { return params_; }
  torch::Tensor& grads() { return grads_; }
  const std::vector<Entry>& entries() const { return entries_; }
  /// Elements of the flat buffers, padding included. Local.
  std::int64_t numel() const { return params_.numel(); }
  /// Elements of the parameters themselves (numel() less the padding). Local.
  std::int64_t parameter_numel() const { return parameter_numel_; }
  /// Zeroes every gradient (the flat buffer; the views stay attached). Local.
  void zero_grads() { grads_.zero_(); }
  /// Whether the flat gradient buffer exists (FlatLayout::gradients). Local.
  bool has_gradients() const { return grads_.defined(); }
  /// Sum of squares of grads()[offset, offset + numel), accumulated in double over fixed chunks
  /// (the result does not depend on the thread count). Local.
  double grad_square_sum(std::int64_t offset, std::int64_t numel) const;
  /// The entry for a parameter name; throws Error if absent. Local.
  const Entry& entry(const std::string& name) const;
  /// Per entry, whether it has a gradient bucket of its own (for bucket_entry_counts). Local.
  std::vector<bool> own_bucket_flags() const;
  /// The gradient buckets of about `bucket_bytes` (0: one entry each) over the entries, grouped
  /// as the layout grouped them. Local.
  FlatBuckets buckets(std::int64_t bucket_bytes) const;

 private:
  torch::Tensor params_;
  torch::Tensor grads_;
  std::vector<Entry> entries_;
  std::int64_t parameter_numel_ = 0;
};

}  // namespace hpctrain::parallel
