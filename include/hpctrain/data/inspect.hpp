#pragma once
// `hpctrain inspect data FILE`: what a dataset file holds, for humans.

#include <cstdint>
#include <string>

namespace hpctrain::data {

struct InspectOptions {
  int samples = 8;               ///< how many samples to show
  std::int64_t seq_len = 64;     ///< window length for token files (they store no seq_len)
  std::int64_t batch_size = 64;  ///< the per-rank batch the memory figure is given for
  int prefetch = 4;              ///< batches read ahead (data.prefetch) in the memory figure
};

/// Validates `path` exactly as training would (Dataset::open; a bad file throws its DataError)
/// and describes it: attributes (schema, source, how it was made), every dataset's dtype, shape,
/// chunking and filters, the sample count, the label histogram or token count, and the first
/// samples' labels or tokens. Local.
std::string describe_data_file(const std::string& path, const InspectOptions& options = {});

}  // namespace hpctrain::data
