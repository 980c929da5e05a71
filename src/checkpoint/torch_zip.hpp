#pragma once
// Private: the tensors of a state_dict that Python saved with torch.save (PyTorch 1.6 and later
// write a zip archive: data.pkl, a pickle, and one record data/<key> per storage).
//
// LibTorch's own torch::pickle_load cannot be used: its unpickler turns collections.OrderedDict,
// the type of every module.state_dict(), into None. So data.pkl is read here by a small pickle
// machine that builds values only (no Python code runs, no class is instantiated): dicts, lists,
// tuples, numbers and strings, storages from their persistent ids, and tensors from
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter. Any other class becomes an opaque value,
// which is fine anywhere but where a tensor is expected. Tensors are described while the pickle
// is read and their bytes read one storage record at a time when asked for.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::checkpoint::torchzip {

/// One tensor of the state_dict: where its elements lie in which storage record.
struct Entry {
  std::string name;
  torch::ScalarType dtype = torch::kFloat;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;
  std::int64_t storage_offset = 0;  ///< in elements
  std::string storage_key;          ///< the record data/<key>
  std::int64_t storage_numel = 0;   ///< elements the pickle says the storage holds
};

/// A torch.save zip archive of a state_dict, opened and its pickle read.
class TorchZipFile {
 public:
  /// Reads data.pkl of the archive at `path` (a regular file, checked by the caller) and finds
  /// the state_dict: the top-level dict of tensors, or the dict of tensors under one of the keys
  /// "state_dict", "model", "model_state_dict" or "module" of a training checkpoint. Throws
  /// CheckpointError naming the path and what is wrong (not a zip, a damaged pickle with its
  /// byte offset, no tensors). Local.
  static TorchZipFile open(const std::string& path);

  /// The state_dict's tensors, in the pickle's order. Local.
  const std::vector<Entry>& entries() const;
  /// Where the state_dict was found: empty for the top level, else "under key 'model'". Local.
  const std::string& location() const;
  /// Entries the state_dict held that were not tensors (their names), skipped. Local.
  const std::vector<std::string>& skipped() const;
  /// Reads `entry` (one of entries()) into a new contiguous CPU tensor of its dtype. Throws
  /// CheckpointError when its record is missing or too short. Local.
  torch::Tensor read(const Entry& entry) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hpctrain::checkpoint::torchzip
