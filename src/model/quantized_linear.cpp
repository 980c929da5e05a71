#include "hpctrain/model/quantized_linear.hpp"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cctype>
#include <limits>
#include <vector>

#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

Int8Weight quantize_int8_per_channel(const torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  const torch::Tensor w = weight.detach().to(torch::kFloat32).contiguous();
  if (w.dim() != 2) {
    throw ConfigError(str("int8 quantization takes a linear weight [out, in], got ", w.sizes()));
  }
  // PerChannelMinMaxObserver (per_channel_symmetric, qint8): the range always holds zero, and the
  // scale is computed in float32 as PyTorch does, so the int8 values are PyTorch's.
  const torch::Tensor min_neg = std::get<0>(w.min(1)).clamp_max(0);
  const torch::Tensor max_pos = std::get<0>(w.max(1)).clamp_min(0);
  const torch::Tensor scales =
      (torch::max(-min_neg, max_pos) / 127.5f).clamp_min(std::numeric_limits<float>::epsilon());
  const torch::Tensor zeros = torch::zeros({w.size(0)}, torch::kLong);
  const torch::Tensor q =
      at::quantize_per_channel(w, scales.to(torch::kDouble), zeros, 0, torch::kQInt8);
  return {q.int_repr().contiguous(), scales.contiguous()};
}

torch::Tensor dequantize(const Int8Weight& weight) {
  return weight.values.to(torch::kFloat32) * weight.scales.to(torch::kFloat32).unsqueeze(1);
}

std::string select_quantized_engine() {
  auto& ctx = at::globalContext();
  const auto supported = ctx.supportedQEngines();
  auto has = [&](at::QEngine e) {
    for (auto s : supported) {
      if (s == e) return true;
    }
    return false;
  };
  for (at::QEngine e :
       {at::QEngine::FBGEMM, at::QEngine::X86, at::QEngine::ONEDNN, at::QEngine::QNNPACK}) {
    if (has(e)) {
      ctx.setQEngine(e);
      std::string name = c10::toString(e);  // "ONEDNN": PyTorch's Python names are lower case
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
  }
  throw ConfigError(
      "this LibTorch has no quantized CPU engine (at::globalContext().supportedQEngines() lists "
      "none of fbgemm, x86, onednn, qnnpack): int8 evaluation cannot run here; build hpctrain "
      "against a LibTorch with one (Debian's has onednn and qnnpack, pip's fbgemm and x86), or "
      "evaluate with --prune only");
}

namespace {

// The ops through the dispatcher, boxed: their packed-parameter class is not in the public
// headers, and the IValue carries it as it is.
c10::OperatorHandle op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
}

}  // namespace

QuantizedLinear::QuantizedLinear(const Int8Weight& weight, const torch::Tensor& bias) {
  static const c10::OperatorHandle prepack = op("quantized::linear_prepack");
  const torch::Tensor zeros = torch::zeros({weight.values.size(0)}, torch::kLong);
  const torch::Tensor q = at::_make_per_channel_quantized_tensor(
      weight.values, weight.scales.to(torch::kDouble), zeros, 0);
  torch::jit::Stack stack{
      q, bias.defined() ? c10::IValue(bias.detach().to(torch::kFloat32)) : c10::IValue()};
  prepack.callBoxed(stack);
  packed_ = stack.at(0);
}

torch::Tensor QuantizedLinear::forward(const torch::Tensor& x) const {
  if (x.dim() > 2) {  // [.., in] (the gpt's [B, T, D]): one batch of rows, one activation range
    std::vector<std::int64_t> sizes = x.sizes().vec();
    const torch::Tensor y = forward(x.reshape({-1, sizes.back()}));
    sizes.back() = y.size(1);
    return y.view(sizes);
  }
  static const c10::OperatorHandle linear = op("quantized::linear_dynamic");
  // reduce_range=True: activations in [0, 127], as PyTorch's dynamic Linear (version 4) calls it.
  torch::jit::Stack stack{x.contiguous(), packed_, true};
  linear.callBoxed(stack);
  return stack.at(0).toTensor();
}

void Model::set_int8_linear(const torch::nn::Module* layer, std::shared_ptr<QuantizedLinear> q) {
  int8_[layer] = std::move(q);
}

const QuantizedLinear* Model::int8_linear(const torch::nn::Module* layer) const {
  if (int8_.empty()) return nullptr;
  auto it = int8_.find(layer);
  return it == int8_.end() ? nullptr : it->second.get();
}

torch::Tensor Model::linear(torch::nn::LinearImpl& layer, const torch::Tensor& x) {
  if (!int8_.empty()) {
    auto it = int8_.find(&layer);
    if (it != int8_.end()) return it->second->forward(x);
  }
  return layer.forward(x);
}

}  // namespace hpctrain::model
