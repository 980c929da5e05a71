#pragma once
// The safetensors format, read and written directly (Debian packages no C++ reader of it): a
// file of named tensors that Hugging Face tools write and load.
//
//   bytes 0-7        N, the header's length, a little-endian unsigned 64-bit integer
//   bytes 8..8+N     the header: a JSON object, UTF-8, possibly padded with spaces, mapping each
//                    tensor's name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
//                    plus an optional "__metadata__" object of strings
//   bytes 8+N..end   the data section: tensor bytes, little-endian, row-major; a tensor's
//                    data_offsets [b, e) count from the start of this section
//
// A file is accepted only when the header length lies within the file, the header parses as
// such an object, every dtype is a safetensors dtype name, every tensor's byte count equals its
// shape times its element size, and the data_offsets, sorted, start at 0, neither overlap nor
// leave gaps, and end exactly at the end of the file. Every refusal names the file, the byte
// offset or the header field, and what was expected (docs/MODELS.md, "Pretrained weights").

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hpctrain::checkpoint {

/// One tensor of a safetensors file.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  ///< the file's dtype name ("F32", "BF16", ...)
  torch::ScalarType scalar_type = torch::kFloat;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  ///< first byte in the file (absolute: 8 + N + data_offsets[0])
  std::uint64_t end = 0;    ///< one past the last byte in the file
};

/// A safetensors file opened for reading, its header validated; tensors are read one at a time
/// (pread), so reading a model takes memory for its largest tensor, not for the file.
class SafetensorsFile {
 public:
  /// Checks that `path` is a regular file (runtime::require_regular_file: a FIFO never blocks),
  /// opens it and validates its header (see the top of this file). Throws CheckpointError naming
  /// the path and the byte offset or field at fault. Local.
  static SafetensorsFile open(const std::string& path);

  /// The tensors in the order of their data in the file. Local.
  const std::vector<SafetensorsEntry>& entries() const;
  /// The "__metadata__" strings (empty when the header has none). Local.
  const std::map<std::string, std::string>& metadata() const;
  /// The entry named `name`, or null. Local.
  const SafetensorsEntry* find(const std::string& name) const;
  /// Reads `entry` (one of entries()) into a new contiguous CPU tensor of its dtype and shape.
  /// Throws CheckpointError when the read fails (the file shrank since it was opened). Local.
  torch::Tensor read(const SafetensorsEntry& entry) const;
  /// The file's path. Local.
  const std::string& path() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/// The safetensors name of a torch dtype ("F32" for float32, "BF16", "I64", ...); throws
/// CheckpointError naming `what` for a dtype the format has no name for. Local.
std::string safetensors_dtype(torch::ScalarType dtype, const std::string& what);

/// Writes `tensors` (name, CPU tensor; made contiguous) as a safetensors file at `path`, in the
/// order given, with `metadata` as "__metadata__", the header padded with spaces to a multiple of
/// 8 bytes (so the data section is aligned). Written to `path` + ".tmp", fsynced and renamed: a
/// reader never sees half a file. Throws CheckpointError naming the path (or a duplicate name,
/// or a dtype the format lacks). Local.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace hpctrain::checkpoint
