#include "hpctrain/plan/memory_plan.hpp"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {

ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int dp,
                               bool shard) {
  if (dp < 1) throw ConfigError(str("data-parallel size ", dp, " must be at least 1"));
  const double state = optimizer_state_bytes_per_parameter(optimizer);
  ParameterBytes b;
  double kept_with_state = state;
  if (layout == WeightLayout::kFloat32) {
    b.weights = 4;
    b.gradients = 4;
  } else {
    b.weights = 2;
    b.gradients = 4;
    kept_with_state += 4;  // float32 master weights, updated by the optimizer
  }
  b.sharded = shard ? kept_with_state / dp : kept_with_state;
  return b;
}

ActivationBytes gpt_activation_bytes(const TransformerShape& shape, std::int64_t heads,
                                     std::int64_t batch, int tp, double element_bytes, bool dropout,
                                     RecomputeMode mode) {
  if (shape.layers < 1 || shape.width < 1 || shape.seq_len < 1 || heads < 1 || batch < 1 ||
      tp < 1 || !(element_bytes > 0)) {
    throw ConfigError(
        "activation estimate: layers, width, seq_len, heads, batch and tp must be "
        "positive");
  }
  const double d = static_cast<double>(shape.width);
  const double f = std::round(d * shape.mlp_ratio);
  const double t = static_cast<double>(shape.seq_len);
  const double tokens = static_cast<double>(batch) * t;
  const double local_heads = static_cast<double>(heads) / tp;
  // Per token: ln1 input and output, ln2 input and output (replicated: 4 D); q, k, v (3 D),
  // the attention context (D), the MLP's pre- and post-GELU features (2 F), all split over tp.
  const double dense = 4 * d + (4 * d + 2 * f) / tp;
  // Attention probabilities: local heads x T per token; with dropout also the dropped copy and
  // its one-byte mask, and one-byte masks of the two residual dropouts.
  double attention = local_heads * t;
  double masks_bytes = 0;
  if (dropout) {
    attention *= 2;
    masks_bytes = local_heads * t + 2 * d;
  }
  const double full_layer = tokens * ((dense + attention) * element_bytes + masks_bytes);
  ActivationBytes a;
  const double input = tokens * d * element_bytes;  // a block's input
  switch (mode) {
    case RecomputeMode::kNone:
      a.per_layer = full_layer;
      a.layers = a.per_layer * static_cast<double>(shape.layers);
      break;
    case RecomputeMode::kAttention:
      a.per_layer =
          full_layer - tokens * (attention * element_bytes + (dropout ? local_heads * t : 0));
      a.layers = a.per_layer * static_cast<double>(shape.layers) +
                 (full_layer - a.per_layer);  // one block's scores, rebuilt in backward
      break;
    case RecomputeMode::kBlock:
      a.per_layer = input;
      a.layers = input * static_cast<double>(shape.layers) + full_layer;
      break;
  }
  // Embedding sum (D), final LayerNorm input and output (2 D), this rank's vocabulary slice of
  // the logits and of the softmax in the cross entropy (2 V / tp, float32).
  const double vocab = std::ceil(static_cast<double>(shape.vocab_size) / tp);
  a.head = tokens * (3 * d * element_bytes + 2 * vocab * 4);
  return a;
}

double gpt_heap_slack_bytes(const ActivationBytes& none, const ActivationBytes& attention,
                            RecomputeMode mode, double weight_bytes) {
  double slack = 2 * none.per_layer + 2 * weight_bytes;
  // The scores and probabilities of a block: what recompute=attention does not keep.
  if (mode == RecomputeMode::kAttention) slack += 2 * (none.per_layer - attention.per_layer);
  return slack;
}

double parse_bytes(const std::string& text, const std::string& what) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double value = std::strtod(begin, &end);
  std::string unit(end);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KiB") scale = 1024.0;
  if (unit == "MiB") scale = 1024.0 * 1024;
  if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  if (unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  if (unit == "KB" || unit == "kB") scale = 1e3;
  if (unit == "MB") scale = 1e6;
  if (unit == "GB") scale = 1e9;
  if (unit == "TB") scale = 1e12;
  if (end == begin || scale == 0 || !(value > 0) || !std::isfinite(value)) {
    throw ConfigError(str(what, " = '", text,
                          "': expected a positive size such as 80GiB, 141GB or 8e10 (bytes)"));
  }
  return value * scale;
}

}  // namespace hpctrain::plan
