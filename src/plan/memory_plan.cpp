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
                                     RecomputeMode mode, double mask_bytes) {
  if (mask_bytes == kCpuDropoutMask) mask_bytes = element_bytes;
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
  // its mask, and the masks of the two residual dropouts (mask_bytes each element).
  double attention = local_heads * t;
  double masks_bytes = 0;
  if (dropout) {
    attention *= 2;
    masks_bytes = (local_heads * t + 2 * d) * mask_bytes;
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
      a.per_layer = full_layer - tokens * (attention * element_bytes +
                                           (dropout ? local_heads * t * mask_bytes : 0));
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
  a.dense = tokens * dense * element_bytes;
  a.probabilities = tokens * attention * element_bytes;
  return a;
}

double gpt_heap_slack_bytes(const ActivationBytes& block, std::int64_t layers, RecomputeMode mode,
                            double weight_bytes) {
  struct Coefficients {
    double dense, probabilities, weights;
  };
  // Least-squares fits (docs/BENCHMARKS.md, "Heap slack"), rounded: none 1.00 0.37 1.46, block
  // 1.43 0.44 1.50, attention 0.92 1.21 1.41.
  Coefficients c{1.0, 0.35, 1.5};
  if (mode == RecomputeMode::kBlock) c = {1.4, 0.45, 1.5};
  if (mode == RecomputeMode::kAttention) c = {0.9, 1.2, 1.4};
  return c.dense * block.dense +
         c.probabilities * static_cast<double>(layers) * block.probabilities +
         c.weights * weight_bytes;
}

const char* recompute_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::kBlock: return "block";
    case RecomputeMode::kAttention: return "attention";
    case RecomputeMode::kNone: break;
  }
  return "none";
}

MemoryPlan make_memory_plan(const MemoryInputs& in, const std::string& optimizer,
                            double device_memory, double host_base) {
  MemoryPlan p;
  p.in = in;
  p.optimizer = optimizer;
  p.run = parameter_bytes(WeightLayout::kFloat32, optimizer, in.dp, in.shard);
  p.other = parameter_bytes(WeightLayout::kFloat32, optimizer, in.dp, !in.shard);
  p.mixed = parameter_bytes(WeightLayout::kBf16WithFloat32Master, optimizer, in.dp, in.shard);
  const double n = in.parameters_per_device;
  p.state_bytes = n * p.run.total();
  double heap_slack = 0;
  if (in.gpt) {
    const double element = activation_element_bytes(in.precision);
    for (auto mode : {RecomputeMode::kNone, RecomputeMode::kBlock, RecomputeMode::kAttention}) {
      p.activations[static_cast<int>(mode)] = gpt_activation_bytes(
          in.shape, in.heads, in.micro_batch, in.tp, element, in.dropout, mode);
    }
    p.run_activation_bytes = p.activations[static_cast<int>(in.recompute)].total();
    p.host_activation_bytes =
        gpt_activation_bytes(in.shape, in.heads, in.micro_batch, in.tp, element, in.dropout,
                             in.recompute, kCpuDropoutMask)
            .total();
    heap_slack = gpt_heap_slack_bytes(p.activations[static_cast<int>(RecomputeMode::kNone)],
                                      in.shape.layers, in.recompute, n * p.run.weights);
  }
  p.total_bytes = p.state_bytes + p.run_activation_bytes;
  // On a CPU host the tensors live in glibc's heap, beside its free space and the process's
  // libraries and buffers: the peak resident memory (docs/PLAN.md, "Memory on a CPU host").
  p.host.tensors = p.state_bytes + p.host_activation_bytes;
  p.host.heap_slack = heap_slack;
  p.host_base_given = host_base > 0;
  p.host.process_base = host_base > 0 ? host_base : kDefaultProcessBaseBytes;
  p.device_memory = device_memory;
  return p;
}

nlohmann::ordered_json memory_plan_to_json(const MemoryPlan& p) {
  const MemoryInputs& m = p.in;
  const double n = m.parameters_per_device;
  nlohmann::ordered_json j;
  j["dp"] = m.dp;
  j["tp"] = m.tp;
  j["shard_optimizer"] = m.shard;
  j["bytes_per_parameter"] = {{"weights", p.run.weights},
                              {"gradients", p.run.gradients},
                              {"optimizer_state", p.run.sharded},
                              {"total", p.run.total()},
                              {m.shard ? "unsharded" : "sharded", p.other.total()},
                              {"bf16_weights_float32_master", p.mixed.total()}};
  j["parameter_bytes"] = n * p.run.weights;
  j["gradient_bytes"] = n * p.run.gradients;
  j["optimizer_state_bytes"] = n * p.run.sharded;
  if (m.gpt) {
    nlohmann::ordered_json acts;
    for (auto mode : {RecomputeMode::kNone, RecomputeMode::kAttention, RecomputeMode::kBlock}) {
      acts[recompute_name(mode)] = p.activations[static_cast<int>(mode)].total();
    }
    j["micro_batch"] = m.micro_batch;
    j["recompute"] = recompute_name(m.recompute);
    j["activation_bytes"] = acts;
  }
  j["total_bytes"] = p.total_bytes;
  j["host"] = {
      {"tensor_bytes", p.host.tensors},
      {"heap_slack_bytes", p.host.heap_slack},
      {"process_base_bytes", p.host.process_base},
      {"process_base", p.host_base_given ? "--host-base" : "default (measured on Debian 12)"},
      {"peak_rss_bytes", p.host.peak_rss()}};
  if (m.gpt) {
    // What the slack model multiplies (gpt_heap_slack_bytes), for refitting it
    // (scripts/bench_heap_slack.sh).
    const auto& block = p.activations[static_cast<int>(RecomputeMode::kNone)];
    j["host"]["heap_slack_terms"] = {
        {"block_dense_bytes", block.dense},
        {"probabilities_bytes", static_cast<double>(m.shape.layers) * block.probabilities},
        {"weight_bytes", n * p.run.weights}};
  }
  if (p.device_memory > 0) {
    j["device_memory"] = p.device_memory;
    j["fits"] = p.fits();
  }
  return j;
}

}  // namespace hpctrain::plan
