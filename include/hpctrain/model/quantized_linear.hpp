#pragma once
// int8 linear layers for compressed evaluation (docs/EVAL.md, "Compressed evaluation"): weights
// quantized per output channel, symmetric (zero point 0), as PyTorch's dynamic quantization
// does (torch.quantization.quantize_dynamic with per_channel_dynamic_qconfig); activations
// quantized per batch at run time. The products run in LibTorch's quantized CPU kernels
// (quantized::linear_prepack / quantized::linear_dynamic, reached through the dispatcher) on the
// quantized engine this LibTorch has: fbgemm or x86 in pip's builds, onednn or qnnpack in
// Debian's, which lacks fbgemm.

#include <torch/torch.h>

#include <string>

namespace hpctrain::model {

/// One linear layer's int8 weight: values [out, in] int8 and one float32 scale per output row;
/// weight ~= values * scales[:, None].
struct Int8Weight {
  torch::Tensor values;  ///< int8 [out, in]
  torch::Tensor scales;  ///< float32 [out]
};

/// Per-output-channel symmetric int8 quantization of a float weight [out, in], bit for bit as
/// PyTorch's PerChannelMinMaxObserver(qint8, per_channel_symmetric) chooses it: scale = max(|min|,
/// |max|) / 127.5 (at least float32's epsilon), values = round(w / scale) clamped to
/// [-128, 127]. Local.
Int8Weight quantize_int8_per_channel(const torch::Tensor& weight);

/// values * scales as float32 [out, in]. Local.
torch::Tensor dequantize(const Int8Weight& weight);

/// Selects the quantized CPU engine for the int8 kernels (fbgemm, x86, onednn, qnnpack, the first
/// this LibTorch supports) and returns its name. Throws ConfigError naming the LibTorch and what
/// to do when it has none. Local.
std::string select_quantized_engine();

/// A linear layer in int8: y = dequant(quant(x) @ values^T) * scales + bias, with x quantized
/// per batch (quint8, range from the batch's min and max). Local.
class QuantizedLinear {
 public:
  /// Packs `weight` (and the float32 `bias`, may be undefined) for the selected engine. Local.
  QuantizedLinear(const Int8Weight& weight, const torch::Tensor& bias);
  /// float32 [B, out] for float32 inputs [B, in]; [.., in] -> [.., out] with one activation
  /// range over all the rows. Local.
  torch::Tensor forward(const torch::Tensor& x) const;

 private:
  c10::IValue packed_;
};

}  // namespace hpctrain::model
