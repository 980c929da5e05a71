#include "hpctrain/data/reader_memory.hpp"

#include <unistd.h>

#include "hpctrain/data/hdf5_util.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {

std::string ReaderMemory::describe() const {
  return str(rows, rows == 1 ? " sample x " : " samples x ", format_bytes(sample_bytes), " x ",
             batches, " batches (data.prefetch ", batches - 2, " + 2) + ", format_bytes(kept_bytes),
             " kept (labels, chunk cache)");
}

ReaderMemory reader_memory(const DatasetInfo& info, std::int64_t rows, int prefetch) {
  ReaderMemory m;
  m.rows = rows;
  m.batches = prefetch + 2;
  double elements = 1;
  for (const std::int64_t d : info.sample_shape) elements *= static_cast<double>(d);
  double targets = 1;
  for (const std::int64_t d : info.target_shape) targets *= static_cast<double>(d);
  // Stored bytes (the staging buffer a read fills) plus the batch tensors (dataset.hpp, Batch).
  const double stored = static_cast<double>(info.sample_bytes);
  switch (info.kind) {
    case DatasetKind::kLanguageModel:
      m.sample_bytes = stored + 2 * 8 * static_cast<double>(info.seq_len);  // int64 inputs, targets
      break;
    case DatasetKind::kRegression: m.sample_bytes = stored + 4 * elements + 4 * targets; break;
    case DatasetKind::kClassification:
      m.sample_bytes = stored + 4 * elements + 8;
      if (info.num_samples <= info.max_labels_in_memory) {
        m.kept_bytes += 8 * static_cast<double>(info.num_samples);
      }
      break;
  }
  m.kept_bytes += static_cast<double>(info.chunk_cache_bytes);
  return m;
}

double machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

void check_reader_memory(const ReaderMemory& reader, double other_bytes, const std::string& key,
                         const DatasetInfo& info) {
  const double memory = machine_memory_bytes();
  const double need = reader.total() + other_bytes;
  if (memory <= 0 || need <= memory / 2) return;
  throw DataError(str(
      key, ": reading ", info.path, " (", info.num_samples, " samples of ",
      h5::shape_string(info.sample_shape), " ", info.input_dtype, ") takes ", format_bytes(need),
      " per rank (", reader.describe(),
      other_bytes > 0 ? str(" + ", format_bytes(other_bytes), " of sample order") : std::string(),
      "), more than half of this machine's memory (", format_bytes(memory),
      "): use a smaller data.batch_size or data.prefetch, or check the file's shapes (hpctrain "
      "inspect data)"));
}

}  // namespace hpctrain::data
