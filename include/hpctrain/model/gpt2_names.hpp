#pragma once
// GPT-2's tensor names (Hugging Face's GPT2LMHeadModel) against the gpt's, and how each tensor's
// layout differs: what model.init_from reads and `hpctrain export --format safetensors` writes
// (docs/MODELS.md, "Pretrained weights", has the table).
//
//   transformer.wte.weight               [V, D]    wte.weight
//   transformer.wpe.weight               [T, D]    wpe.weight
//   transformer.h.N.ln_1.weight / bias   [D]       blocks.N.ln1.weight / bias
//   transformer.h.N.attn.c_attn.weight   [D, 3D]   blocks.N.attn.qkv.weight  [3, D, D]  transposed
//   transformer.h.N.attn.c_attn.bias     [3D]      blocks.N.attn.qkv.bias    [3, D]
//   transformer.h.N.attn.c_proj.weight   [D, D]    blocks.N.attn.proj.weight            transposed
//   transformer.h.N.attn.c_proj.bias     [D]       blocks.N.attn.proj.bias
//   transformer.h.N.ln_2.weight / bias   [D]       blocks.N.ln2.weight / bias
//   transformer.h.N.mlp.c_fc.weight      [D, F]    blocks.N.mlp.fc.weight    [F, D]     transposed
//   transformer.h.N.mlp.c_fc.bias        [F]       blocks.N.mlp.fc.bias
//   transformer.h.N.mlp.c_proj.weight    [F, D]    blocks.N.mlp.proj.weight  [D, F]     transposed
//   transformer.h.N.mlp.c_proj.bias      [D]       blocks.N.mlp.proj.bias
//   transformer.ln_f.weight / bias       [D]       ln_f.weight / bias
//   lm_head.weight                       [V, D]    lm_head.weight (untied), or wte (tied)
//
// GPT-2's linear layers are Conv1D modules, whose weight is [in, out]: the transpose of a
// torch.nn.Linear's (and of the gpt's) [out, in]. c_attn's output is q, k, v one after another,
// each with the heads in order, as the gpt's stacked qkv, so its transpose viewed as [3, D, D] is
// the gpt's qkv weight. Files that store these weights as nn.Linear does (nanoGPT's) are read
// too: the orientation is told apart by c_attn's shape, [D, 3D] or [3D, D].

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/model/gpt.hpp"

namespace hpctrain::model {

/// How a GPT-2 tensor's layout differs from the gpt parameter it maps to.
enum class Gpt2Layout {
  kSame,       ///< the same shape and element order
  kLinear,     ///< a 2-D weight, [in, out] in a Conv1D file, the gpt's [out, in]
  kQkvWeight,  ///< attn.c_attn.weight: [D, 3D] in a Conv1D file, the gpt's [3, D, D]
  kQkvBias,    ///< attn.c_attn.bias: [3D], the gpt's [3, D]
};

/// One tensor of GPT-2's state_dict and the gpt parameter it maps to.
struct Gpt2Tensor {
  std::string gpt2_name;  ///< "transformer.h.0.attn.c_attn.weight"
  std::string name;       ///< "blocks.0.attn.qkv.weight"
  Gpt2Layout layout = Gpt2Layout::kSame;
};

/// Every tensor of GPT2LMHeadModel's state_dict for a gpt of `options` (with the "transformer."
/// prefix), in the order of the table above; lm_head.weight only when the gpt's head is untied
/// (tied, GPT-2 ties it to wte and Hugging Face's files leave it out). Local.
std::vector<Gpt2Tensor> gpt2_tensors(const GptOptions& options);

/// `name` without a leading "transformer." (GPT2Model's names lack it, GPT2LMHeadModel's have
/// it). Local.
std::string strip_gpt2_prefix(const std::string& name);

/// Whether `name` is in GPT-2's naming: a block tensor ("h.N." with or without "transformer.")
/// or "transformer.wte.weight". (wte.weight, wpe.weight and ln_f.* are the same in both
/// namings.) Local.
bool is_gpt2_name(const std::string& name);

/// GPT-2's causal-mask buffers (h.N.attn.bias [1, 1, T, T], h.N.attn.masked_bias): derived, not
/// parameters, skipped on import. Local.
bool is_gpt2_mask_buffer(const std::string& name);

/// The shape GPT-2's tensor has for a gpt parameter of logical shape `shape`; `conv1d` false for
/// files that store linear weights as nn.Linear does. Local.
std::vector<std::int64_t> gpt2_shape(const std::vector<std::int64_t>& shape, Gpt2Layout layout,
                                     bool conv1d);

/// GPT-2's tensor -> the gpt parameter's logical tensor (contiguous), for a `conv1d` or an
/// nn.Linear file. Local.
torch::Tensor from_gpt2(const torch::Tensor& tensor, Gpt2Layout layout, bool conv1d);

/// The gpt parameter's logical tensor -> GPT-2's (Conv1D orientation, contiguous). Local.
torch::Tensor to_gpt2(const torch::Tensor& tensor, Gpt2Layout layout);

}  // namespace hpctrain::model
