#include "hpctrain/plan/memory_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {

const char* shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::kOptimizer: return "optimizer";
    case ShardMode::kGradients: return "gradients";
    case ShardMode::kFull: return "full";
    case ShardMode::kNone: break;
  }
  return "none";
}

ShardMode parse_shard_mode(const std::string& name, const std::string& what) {
  for (auto mode :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    if (name == shard_mode_name(mode)) return mode;
  }
  throw ConfigError(
      str(what, " = '", name, "': expected none, optimizer, gradients or full (docs/PLAN.md)"));
}

ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int shard_ranks,
                               ShardMode mode) {
  if (shard_ranks < 1) {
    throw ConfigError(str("a shard group of ", shard_ranks, " ranks: it must be at least 1"));
  }
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
  const double s = shard_ranks;
  b.sharded = mode == ShardMode::kNone ? kept_with_state : kept_with_state / s;
  if (mode >= ShardMode::kGradients) b.gradients /= s;
  if (mode == ShardMode::kFull) b.weights /= s;
  return b;
}

ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int dp,
                               bool shard) {
  return parameter_bytes(layout, optimizer, dp, shard ? ShardMode::kOptimizer : ShardMode::kNone);
}

GatherUnits gpt_gather_units(const TransformerShape& shape, int tp) {
  GatherUnits u;
  u.block = transformer_block_parameters(shape) / tp;
  u.root = (transformer_embedding_parameters(shape) + transformer_non_embedding_parameters(shape) -
            static_cast<double>(shape.layers) * transformer_block_parameters(shape)) /
           tp;
  return u;
}

namespace {

// (n - 1) / n: the share of a ring collective's data one rank sends per byte it holds.
double ring_share(double n) {
  return (n - 1) / n;
}

}  // namespace

StepCommunication step_communication(const MemoryInputs& in) {
  const ShardMode mode = in.mode();
  const int s = in.group();
  if (in.dp < 1 || s < 1 || in.dp % s != 0) {
    throw ConfigError(str("parallel.shard_group = ", s, " does not divide the ", in.dp,
                          " data-parallel ranks: give dp, node or a divisor of ", in.dp));
  }
  const double n = in.parameters_per_device;
  const double replicas = static_cast<double>(in.dp / s);
  const double m = static_cast<double>(std::max<std::int64_t>(1, in.micro_batches));
  StepCommunication c;
  switch (mode) {
    case ShardMode::kNone: c.reduce = 2 * n * 4 * ring_share(in.dp); break;
    case ShardMode::kOptimizer:
    case ShardMode::kGradients: {
      // Reduce-scatter (every micro-batch under gradients, which keeps no whole gradient), the
      // owned chunk across the shard groups, then the updated float32 chunks gathered.
      const double grads = n * (mode == ShardMode::kGradients ? in.reduce_dtype_bytes : 4);
      c.reduce = (mode == ShardMode::kGradients ? m : 1) * grads * ring_share(s);
      c.replicas = 2 * grads / s * ring_share(replicas);
      c.gather = n * 4 * ring_share(s);
      break;
    }
    case ShardMode::kFull: {
      // Each micro-batch gathers every unit for its forward and, resharded, every unit but the
      // root again for its backward, and reduce-scatters the gradients; the owned chunks are
      // added across the shard groups once a step.
      const double params = n * in.param_dtype_bytes;
      const double root =
          in.decoder ? gpt_gather_units(in.shape, in.tp).root * in.param_dtype_bytes : params;
      const double grads = n * in.reduce_dtype_bytes;
      c.gather = m * (params + (in.reshard_after_forward ? params - root : 0)) * ring_share(s);
      c.reduce = m * grads * ring_share(s);
      c.replicas = 2 * grads / s * ring_share(replicas);
      break;
    }
  }
  if (in.decoder && in.tp > 1 && in.micro_batch > 0) {
    const double activation =
        static_cast<double>(in.micro_batch) * static_cast<double>(in.shape.seq_len) *
        static_cast<double>(in.shape.width) * activation_element_bytes(in.precision);
    const double per_block = in.recompute == RecomputeMode::kBlock ? 6 : 4;
    const double all_reduces = 2 + per_block * static_cast<double>(in.shape.layers);
    c.tensor_parallel = m * all_reduces * 2 * activation * ring_share(in.tp);
  }
  return c;
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
  double dense = 4 * d + (4 * d + 2 * f) / tp;
  if (shape.swiglu) {
    // The llama's block (model/llama_block.cpp), an estimate not yet fitted to measurements:
    // the two RMSNorms' inputs and outputs (4 D); q, k, v as projected ((H + 2 KV) hd), rotated
    // q and k, v expanded to the query heads and the context (4 H hd); gate and up (2 F), silu
    // of gate and the product (2 F); all but the norms split over tp.
    const double hd =
        static_cast<double>(shape.head_dim > 0 ? shape.head_dim : shape.width / heads);
    const double kv = static_cast<double>(shape.kv_heads > 0 ? shape.kv_heads : heads);
    const double h = static_cast<double>(heads);
    dense =
        4 * d + ((h + 2 * kv) * hd + 4 * h * hd + 4 * static_cast<double>(shape.ffn_width)) / tp;
  }
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
  const ShardMode mode = in.mode();
  const int s = in.group();
  p.comm = step_communication(in);  // checks the shard group
  p.run = parameter_bytes(WeightLayout::kFloat32, optimizer, s, mode);
  // For comparison: sharded optimizer state when this run shards nothing, else nothing sharded.
  p.other = parameter_bytes(WeightLayout::kFloat32, optimizer, s,
                            mode == ShardMode::kNone ? ShardMode::kOptimizer : ShardMode::kNone);
  p.mixed = parameter_bytes(WeightLayout::kBf16WithFloat32Master, optimizer, s, mode);
  for (auto each :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    p.modes[static_cast<int>(each)] = parameter_bytes(WeightLayout::kFloat32, optimizer, s, each);
  }
  const double n = in.parameters_per_device;
  p.state_bytes = n * p.run.total();
  if (mode == ShardMode::kFull) {
    // The unit computing and the next one, prefetched, plus the root, which stays gathered for
    // the whole step; in backward the unsharded gradients of the root, of the block accumulating
    // and of the two whose reduce-scatters may still be in flight (the strategy keeps at most
    // two). A model other than the gpt is one unit.
    if (in.decoder) {
      const GatherUnits u = gpt_gather_units(in.shape, in.tp);
      const double blocks = std::min<double>(2, static_cast<double>(in.shape.layers));
      p.gathered_bytes = (blocks * u.block + u.root) * in.param_dtype_bytes;
      const double grad_blocks = std::min<double>(3, static_cast<double>(in.shape.layers));
      p.gathered_gradient_bytes = (grad_blocks * u.block + u.root) * in.param_dtype_bytes;
    } else {
      p.gathered_bytes = n * in.param_dtype_bytes;
      p.gathered_gradient_bytes = n * in.param_dtype_bytes;
    }
  } else if (mode == ShardMode::kGradients) {
    // One bucket filling while the two before it are reduce-scattered (the reducer keeps at most
    // two in flight); with one bucket per parameter (bucket_mb 0) the largest of the gpt (its
    // embedding, an MLP matrix).
    double bucket = in.bucket_bytes;
    if (!(bucket > 0) && in.decoder) {
      const double d = static_cast<double>(in.shape.width);
      bucket = 4 *
               std::max(static_cast<double>(in.shape.vocab_size) * d,
                        d * std::round(d * in.shape.mlp_ratio)) /
               in.tp;
    }
    p.bucket_in_flight_bytes = std::min(3 * std::max(bucket, 0.0), n * 4);
  }
  const double transient = p.gathered_bytes + p.gathered_gradient_bytes + p.bucket_in_flight_bytes;
  double heap_slack = 0;
  if (in.decoder) {
    const double element = activation_element_bytes(in.precision);
    for (auto each : {RecomputeMode::kNone, RecomputeMode::kBlock, RecomputeMode::kAttention}) {
      p.activations[static_cast<int>(each)] = gpt_activation_bytes(
          in.shape, in.heads, in.micro_batch, in.tp, element, in.dropout, each);
    }
    p.run_activation_bytes = p.activations[static_cast<int>(in.recompute)].total();
    p.host_activation_bytes =
        gpt_activation_bytes(in.shape, in.heads, in.micro_batch, in.tp, element, in.dropout,
                             in.recompute, kCpuDropoutMask)
            .total();
    heap_slack = gpt_heap_slack_bytes(p.activations[static_cast<int>(RecomputeMode::kNone)],
                                      in.shape.layers, in.recompute, n * p.run.weights);
  }
  p.total_bytes = p.state_bytes + p.run_activation_bytes + transient;
  // On a CPU host the tensors live in glibc's heap, beside its free space and the process's
  // libraries and buffers: the peak resident memory (docs/PLAN.md, "Memory on a CPU host").
  p.host.tensors = p.state_bytes + p.host_activation_bytes + transient;
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
  const ShardMode mode = m.mode();
  j["shard_optimizer"] = mode != ShardMode::kNone;
  j["shard"] = shard_mode_name(mode);
  j["shard_group"] = m.group();
  j["bytes_per_parameter"] = {{"weights", p.run.weights},
                              {"gradients", p.run.gradients},
                              {"optimizer_state", p.run.sharded},
                              {"total", p.run.total()},
                              {mode != ShardMode::kNone ? "unsharded" : "sharded", p.other.total()},
                              {"bf16_weights_float32_master", p.mixed.total()}};
  nlohmann::ordered_json by_mode;
  for (auto each :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    by_mode[shard_mode_name(each)] = p.modes[static_cast<int>(each)].total();
  }
  j["bytes_per_parameter_by_shard"] = by_mode;
  j["parameter_bytes"] = n * p.run.weights;
  j["gradient_bytes"] = n * p.run.gradients;
  j["optimizer_state_bytes"] = n * p.run.sharded;
  if (mode == ShardMode::kFull) {
    j["param_dtype_bytes"] = m.param_dtype_bytes;
    j["reshard_after_forward"] = m.reshard_after_forward;
    j["gathered_bytes"] = p.gathered_bytes;
    j["gathered_gradient_bytes"] = p.gathered_gradient_bytes;
  }
  if (mode == ShardMode::kGradients) j["bucket_in_flight_bytes"] = p.bucket_in_flight_bytes;
  if (m.decoder) {
    nlohmann::ordered_json acts;
    for (auto mode : {RecomputeMode::kNone, RecomputeMode::kAttention, RecomputeMode::kBlock}) {
      acts[recompute_name(mode)] = p.activations[static_cast<int>(mode)].total();
    }
    j["micro_batch"] = m.micro_batch;
    j["recompute"] = recompute_name(m.recompute);
    j["activation_bytes"] = acts;
  }
  j["total_bytes"] = p.total_bytes;
  j["communication_bytes_per_step"] = {{"gather", p.comm.gather},
                                       {"reduce", p.comm.reduce},
                                       {"replicas", p.comm.replicas},
                                       {"tensor_parallel", p.comm.tensor_parallel},
                                       {"total", p.comm.total()}};
  j["host"] = {
      {"tensor_bytes", p.host.tensors},
      {"heap_slack_bytes", p.host.heap_slack},
      {"process_base_bytes", p.host.process_base},
      {"process_base", p.host_base_given ? "--host-base" : "default (measured on Debian 12)"},
      {"peak_rss_bytes", p.host.peak_rss()}};
  if (m.decoder) {
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

std::string layout_settings(const MemoryInputs& in) {
  const ShardMode mode = in.mode();
  std::string out = str("parallel.shard=", shard_mode_name(mode));
  if (mode != ShardMode::kNone) {
    out += " parallel.shard_group=";
    out += in.group() == in.dp ? std::string("dp") : std::to_string(in.group());
  }
  out += str(" parallel.tp=", in.tp);
  if (in.decoder) out += str(" model.recompute=", recompute_name(in.recompute));
  return out;
}

}  // namespace hpctrain::plan
