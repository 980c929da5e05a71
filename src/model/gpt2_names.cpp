// GPT-2's names and layouts against the gpt's (the table is in include/hpctrain/model/
// gpt2_names.hpp).

#include "hpctrain/model/gpt2_names.hpp"

#include <regex>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

std::vector<Gpt2Tensor> gpt2_tensors(const GptOptions& options) {
  std::vector<Gpt2Tensor> out{{"transformer.wte.weight", "wte.weight", Gpt2Layout::kSame},
                              {"transformer.wpe.weight", "wpe.weight", Gpt2Layout::kSame}};
  const std::pair<const char*, const char*> norms[] = {{"ln_1", "ln1"}, {"ln_2", "ln2"}};
  for (std::int64_t i = 0; i < options.layers; ++i) {
    const std::string h = str("transformer.h.", i, ".");
    const std::string b = str("blocks.", i, ".");
    for (const char* p : {"weight", "bias"}) {
      out.push_back({h + norms[0].first + "." + p, b + norms[0].second + "." + p});
    }
    out.push_back({h + "attn.c_attn.weight", b + "attn.qkv.weight", Gpt2Layout::kQkvWeight});
    out.push_back({h + "attn.c_attn.bias", b + "attn.qkv.bias", Gpt2Layout::kQkvBias});
    out.push_back({h + "attn.c_proj.weight", b + "attn.proj.weight", Gpt2Layout::kLinear});
    out.push_back({h + "attn.c_proj.bias", b + "attn.proj.bias"});
    for (const char* p : {"weight", "bias"}) {
      out.push_back({h + norms[1].first + "." + p, b + norms[1].second + "." + p});
    }
    out.push_back({h + "mlp.c_fc.weight", b + "mlp.fc.weight", Gpt2Layout::kLinear});
    out.push_back({h + "mlp.c_fc.bias", b + "mlp.fc.bias"});
    out.push_back({h + "mlp.c_proj.weight", b + "mlp.proj.weight", Gpt2Layout::kLinear});
    out.push_back({h + "mlp.c_proj.bias", b + "mlp.proj.bias"});
  }
  out.push_back({"transformer.ln_f.weight", "ln_f.weight"});
  out.push_back({"transformer.ln_f.bias", "ln_f.bias"});
  if (!options.tied_embeddings) out.push_back({"lm_head.weight", "lm_head.weight"});
  return out;
}

std::string strip_gpt2_prefix(const std::string& name) {
  static const std::string prefix = "transformer.";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

bool is_gpt2_name(const std::string& name) {
  static const std::regex block(R"(^(transformer\.)?h\.[0-9]+\..*)");
  return name == "transformer.wte.weight" || std::regex_match(name, block);
}

bool is_gpt2_mask_buffer(const std::string& name) {
  static const std::regex mask(R"(^(transformer\.)?h\.[0-9]+\.attn\.(bias|masked_bias)$)");
  return std::regex_match(name, mask);
}

std::vector<std::int64_t> gpt2_shape(const std::vector<std::int64_t>& shape, Gpt2Layout layout,
                                     bool conv1d) {
  switch (layout) {
    case Gpt2Layout::kSame: return shape;
    case Gpt2Layout::kLinear:
      if (shape.size() != 2) return shape;
      return conv1d ? std::vector<std::int64_t>{shape[1], shape[0]} : shape;
    case Gpt2Layout::kQkvWeight:
      if (shape.size() != 3) return shape;
      return conv1d ? std::vector<std::int64_t>{shape[2], shape[0] * shape[1]}
                    : std::vector<std::int64_t>{shape[0] * shape[1], shape[2]};
    case Gpt2Layout::kQkvBias:
      if (shape.size() != 2) return shape;
      return {shape[0] * shape[1]};
  }
  return shape;
}

torch::Tensor from_gpt2(const torch::Tensor& tensor, Gpt2Layout layout, bool conv1d) {
  switch (layout) {
    case Gpt2Layout::kSame: return tensor.contiguous();
    case Gpt2Layout::kLinear: return conv1d ? tensor.t().contiguous() : tensor.contiguous();
    case Gpt2Layout::kQkvWeight: {
      // [D, 3D] (Conv1D) or [3D, D] (Linear) -> [3D, D] -> [3, D, D]: output rows q, k, v.
      torch::Tensor out = conv1d ? tensor.t().contiguous() : tensor.contiguous();
      return out.view({3, out.size(0) / 3, out.size(1)});
    }
    case Gpt2Layout::kQkvBias: return tensor.contiguous().view({3, tensor.size(0) / 3});
  }
  return tensor.contiguous();
}

torch::Tensor to_gpt2(const torch::Tensor& tensor, Gpt2Layout layout) {
  switch (layout) {
    case Gpt2Layout::kSame: return tensor.contiguous();
    case Gpt2Layout::kLinear: return tensor.t().contiguous();
    case Gpt2Layout::kQkvWeight:
      return tensor.contiguous()
          .view({tensor.size(0) * tensor.size(1), tensor.size(2)})
          .t()
          .contiguous();
    case Gpt2Layout::kQkvBias: return tensor.contiguous().view({tensor.numel()});
  }
  return tensor.contiguous();
}

}  // namespace hpctrain::model
