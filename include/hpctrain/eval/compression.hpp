#pragma once
// Compressed evaluation (docs/EVAL.md, "Compressed evaluation"): magnitude pruning (L1,
// unstructured, over all prunable weights or per layer) and int8 dynamic quantization of linear
// layers (model/quantized_linear.hpp), applied to a model in memory, and the records a
// compressed checkpoint stores: model/<name> for every float tensor and, for each int8 layer,
// int8/<layer>.weight (int8 [out, in]) with int8/<layer>.weight_scale (float32 [out]) in place
// of model/<layer>.weight. Convolutions stay float32.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/model/quantized_linear.hpp"

namespace hpctrain::model {
class Model;
}

namespace hpctrain::eval {

struct EvalResult;

/// What to do to a model: --quantize, --prune, --prune-scope.
struct CompressionSpec {
  std::string quantize;          ///< "" or "int8"
  double prune = 0;              ///< fraction of the prunable weights set to zero, in (0, 1)
  std::string scope = "global";  ///< global: one threshold over all prunable weights; layer: each

  bool any() const { return !quantize.empty() || prune > 0; }
  /// Throws ConfigError (exit 2) naming the option and the values it takes. Local.
  void validate() const;
  /// "int8", "prune0.5", "int8-prune0.9-layer": names results and tells them apart. Local.
  std::string tag() const;
  nlohmann::ordered_json to_json() const;
  static CompressionSpec from_json(const nlohmann::json& j);
};

/// A model after compress_model: what was done, per layer, and the int8 weights by layer name.
struct CompressedModel {
  nlohmann::ordered_json report;                  ///< spec, engine, layers, bytes (docs/EVAL.md)
  std::map<std::string, model::Int8Weight> int8;  ///< "fc1" -> its int8 weight
};

/// Prunes (in place: the pruned weights become exact zeros) and then quantizes `model`'s linear
/// layers (set_int8_linear), as `spec` says. Prunable weights: those of torch::nn::Linear and
/// Conv1d/2d/3d layers; quantized: torch::nn::Linear layers. The number pruned is
/// round(sparsity * n), the smallest |w| first, as torch.nn.utils.prune.l1_unstructured (per layer)
/// and global_unstructured (global) choose them. Throws ConfigError when the model has no layer
/// the spec applies to, or no quantized engine exists. Local; every rank computes the same.
CompressedModel compress_model(model::Model& model, const CompressionSpec& spec);

/// Records that load an int8 compressed checkpoint into `model` (built, float): model/<name> for
/// every tensor except the int8 layers' weights, int8/<layer>.weight and .weight_scale for those
/// named in `compression` (the checkpoint's record), backed by tensors in `int8` (filled by the
/// load). Local.
std::vector<checkpoint::TensorRecord> compressed_records(
    model::Model& model, const nlohmann::json& compression,
    std::map<std::string, model::Int8Weight>& int8);

/// Runs the layers of `int8` in int8 (after a load with compressed_records). Local.
void install_int8(model::Model& model, const std::map<std::string, model::Int8Weight>& int8);

/// The compressed evaluation beside the float32 one: the float32 metrics and samples/s, the drops
/// (accuracy: float32 - compressed; loss: compressed - float32, also relative; perplexity), the
/// speed ratio. Sets `warning` (else leaves it empty) when the drop passes `max_drop`: absolute
/// accuracy for classification, relative loss otherwise. Local.
nlohmann::ordered_json compare_with_float32(const EvalResult& compressed, const EvalResult& base,
                                            double max_drop, std::string& warning);

/// One line for the log: what was done, the metrics beside float32, bytes and samples/s. Local.
std::string compression_line(const nlohmann::json& compression);

/// Bytes of the model's tensors as stored: float tensors plus int8 values and scales. Local.
std::int64_t model_bytes(model::Model& model, const std::map<std::string, model::Int8Weight>& int8);

}  // namespace hpctrain::eval
