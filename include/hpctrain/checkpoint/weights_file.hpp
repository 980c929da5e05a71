#pragma once
// Named tensors that a model's weights can come from (model.init_from; docs/MODELS.md,
// "Pretrained weights"), whatever wrote them:
//   - an hpctrain checkpoint: a step_<N> directory, or a run directory (its newest checkpoint
//     that verifies); verified first, its model/ tensors only (no optimizer state)
//   - a safetensors file (checkpoint/safetensors.hpp), or a Hugging Face model folder: a
//     directory holding model.safetensors, or shards listed by model.safetensors.index.json
//     (its weight_map: tensor name -> file; every shard must hold exactly the tensors it lists)
//   - a PyTorch state_dict saved with torch.save (the zip format of PyTorch 1.6 and later), or a
//     directory holding pytorch_model.bin
// Tensors are listed when the file opens and read one at a time, whole (logical, unsharded).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hpctrain::checkpoint {

/// The index of a Hugging Face folder's sharded safetensors files.
inline constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";

class WeightsFile {
 public:
  enum class Format { kCheckpoint, kSafetensors, kTorch };

  /// One tensor of the file: its name, dtype and shape.
  struct Tensor {
    std::string name;
    torch::ScalarType dtype = torch::kFloat;
    std::vector<std::int64_t> shape;
  };

  /// Opens `path` and lists its tensors; the format is told by what the path is and by the file's
  /// first bytes, not by its name. Every file is checked to be a regular file before it is opened
  /// (a FIFO never blocks). Throws CheckpointError naming the path and what is wrong (missing,
  /// not a regular file, an unknown or damaged format, a checkpoint that does not verify). Local.
  static WeightsFile open(const std::string& path);

  Format format() const;
  /// "safetensors file 'x.safetensors'", "hpctrain checkpoint '.../step_00000030'", ... Local.
  const std::string& description() const;
  /// The tensors, in the file's order. Local.
  const std::vector<Tensor>& tensors() const;
  /// The tensor named `name`, or null. Local.
  const Tensor* find(const std::string& name) const;
  /// Remarks worth a log line (where a torch.save file kept its state_dict, entries skipped).
  /// Local.
  const std::vector<std::string>& notes() const;
  /// Reads tensor `name` whole into a new contiguous CPU tensor of the file's dtype. Throws
  /// CheckpointError for an unknown name or a read that fails. Local.
  torch::Tensor read(const std::string& name) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hpctrain::checkpoint
