#pragma once
// What reading a dataset takes in memory on one rank, computed from its metadata before anything
// is allocated (docs/DATA.md, "Memory"): a file whose shape declares samples larger than memory
// holds (a damaged or hostile file, unallocated chunks) is refused with the figure, instead of
// failing at the first batch with "out of memory".

#include <cstdint>
#include <string>

#include "hpctrain/data/dataset.hpp"

namespace hpctrain::data {

/// One rank's reader memory for a dataset.
struct ReaderMemory {
  double kept_bytes = 0;    ///< held for the whole run: labels kept in memory, the chunk cache
  double sample_bytes = 0;  ///< one sample in a batch: as stored, plus the batch tensors' copy
  std::int64_t rows = 0;    ///< samples per batch
  int batches = 0;          ///< batches alive at once: data.prefetch read ahead + 2
  double total() const {
    return kept_bytes + sample_bytes * static_cast<double>(rows) * static_cast<double>(batches);
  }
  /// "16 samples x 3.7 GiB x 6 batches (data.prefetch 4 + 2) + 1.2 MiB kept (labels, chunk
  /// cache)".
  std::string describe() const;
};

/// The reader memory of `info` at `rows` samples a batch with `prefetch` batches read ahead.
/// Local.
ReaderMemory reader_memory(const DatasetInfo& info, std::int64_t rows, int prefetch);

/// This machine's physical memory in bytes (0 when unknown). Local.
double machine_memory_bytes();

/// Throws DataError (exit 3) naming `key` ("data.train"), the figure and the fix when `reader`
/// plus `other_bytes` (the sampler's order) takes more than half of this machine's memory.
/// Local; every rank computes the same figure from the same metadata.
void check_reader_memory(const ReaderMemory& reader, double other_bytes, const std::string& key,
                         const DatasetInfo& info);

}  // namespace hpctrain::data
