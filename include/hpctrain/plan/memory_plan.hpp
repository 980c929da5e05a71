#pragma once
// Memory per device of a training run (docs/PLAN.md, "Memory"): bytes per parameter for the
// weights, gradients and optimizer state in each shard mode (none, optimizer, gradients, full:
// ZeRO 0 to 3; the table of Megatron-LM's distributed optimizer for optimizer), an estimate of the
// activations one micro-batch of hpctrain's gpt keeps for backward, with and without activation
// recomputation, what full sharding gathers at the peak, and the communication of a step. Pure
// arithmetic: no LibTorch, MPI or HDF5. Local.

#include <cstdint>
#include <string>

#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/precision.hpp"
#include "hpctrain/runtime/strings.hpp"  // parse_bytes: --device-memory, --host-base

namespace hpctrain::plan {

/// How weights and gradients are stored.
enum class WeightLayout {
  /// float32 weights and gradients; hpctrain's layout, bf16 autocast included (it casts the
  /// float32 weights on the fly).
  kFloat32,
  /// bf16 weights, float32 gradients and float32 master weights kept with the optimizer state
  /// (Megatron-LM's bf16 layout; shown for comparison).
  kBf16WithFloat32Master,
};

/// parallel.shard as the plan library knows it (plan/ does not depend on parallel/: the command
/// maps parallel::ShardMode onto it): what a shard group of S data-parallel ranks divides among
/// them, as the ZeRO stages 0 to 3.
enum class ShardMode { kNone = 0, kOptimizer = 1, kGradients = 2, kFull = 3 };

/// "none", "optimizer", "gradients", "full" (the parallel.shard names). Local.
const char* shard_mode_name(ShardMode mode);

/// The mode of a parallel.shard name; throws ConfigError naming `what` and the choices. Local.
ShardMode parse_shard_mode(const std::string& name, const std::string& what);

/// Bytes per parameter, split the way the state is kept.
struct ParameterBytes {
  double weights = 0;    ///< replicated over dp, except under full (divided by S)
  double gradients = 0;  ///< replicated over dp, except under gradients and full (divided by S)
  double sharded = 0;    ///< optimizer state (and master weights) per dp rank, after sharding
  /// Everything per parameter on one device.
  double total() const { return weights + gradients + sharded; }
};

/// Bytes per parameter for `optimizer` (optimizer_state_bytes_per_parameter names) on one device
/// of a shard group of `shard_ranks` ranks in shard mode `mode`. float32 with Adam: none 16,
/// optimizer 4 + 4 + 8/S, gradients 4 + 4/S + 8/S, full 16/S; bf16 weights with float32
/// gradients and master weights (the master weights kept with the optimizer state): 18,
/// 2 + 4 + 12/S, 2 + 16/S, 18/S. Throws ConfigError for shard_ranks < 1 or an unknown
/// optimizer. Local.
ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int shard_ranks,
                               ShardMode mode);

/// The same with the optimizer state sharded over `dp` ranks (`shard`: ShardMode::kOptimizer) or
/// not (kNone): float32 with Adam 16 vs 8 + 8/dp, bf16 with float32 master weights 18 vs
/// 6 + 12/dp. Local.
ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int dp,
                               bool shard);

/// The units parameter sharding (`full`) gathers, in parameters per tp rank: one gpt block
/// (`block`), gathered for its forward and again for its backward, and the root (`root`: token
/// and position embeddings, the final LayerNorm, an untied head), gathered for the whole step.
struct GatherUnits {
  double block = 0;
  double root = 0;
};

/// The gather units of the gpt `shape` split over `tp` ranks: per block 4 D^2 + 2 F D + 9 D + F,
/// root V D + T D + 2 D (+ V D untied), each / tp. Local.
GatherUnits gpt_gather_units(const TransformerShape& shape, int tp);

/// What the gpt keeps for backward (model.recompute).
enum class RecomputeMode { kNone, kBlock, kAttention };

/// Activations of one micro-batch of the gpt on one tp rank, in bytes.
struct ActivationBytes {
  double per_layer = 0;  ///< one block, as kept for backward
  double layers = 0;     ///< all blocks (with recomputation: their inputs, plus one block's
                         ///< full activations, which backward rebuilds one block at a time)
  double head = 0;       ///< embeddings, final norm, logits and the cross entropy
  // One block's parts as kept without recomputation, masks left out (whatever the mode):
  double dense = 0;          ///< the activations other than the attention probabilities
  double probabilities = 0;  ///< the attention probabilities (with dropout also their dropped copy)
  double total() const { return layers + head; }
};

/// Estimate for micro-batch `batch` sequences of the shape's seq_len tokens, `heads` attention
/// heads, `tp` ranks, activations of `element_bytes` (4 float32, 2 bf16), and `dropout` > 0
/// (masks and dropped copies). Counts the tensors LibTorch saves for backward in the gpt's block
/// (model/gpt_block.cpp): per token 8 D + 2 F values of which 3 D + D + 2 F are split over tp,
/// plus heads x T attention probabilities (split over tp). Throws ConfigError for sizes < 1.
/// Local.
/// `mask_bytes` is the size of one dropout-mask element: 1 where LibTorch's fused dropout keeps a
/// bool mask (CUDA), the activation element size on a CPU, where LibTorch keeps a scaled noise
/// tensor of the input's type (kCpuDropoutMask).
ActivationBytes gpt_activation_bytes(const TransformerShape& shape, std::int64_t heads,
                                     std::int64_t batch, int tp, double element_bytes, bool dropout,
                                     RecomputeMode mode, double mask_bytes = 1);

/// gpt_activation_bytes's `mask_bytes` for a CPU: the element size of the activations.
constexpr double kCpuDropoutMask = -1;

/// Peak resident memory of one rank training on a CPU host (docs/PLAN.md, "Memory on a CPU
/// host"): the tensors alive at the peak (what a device would hold: state + activations), the
/// free space glibc's heap keeps beside them, and the process's fixed base.
struct HostMemory {
  double tensors = 0;       ///< weights, gradients, optimizer state and activations
  double heap_slack = 0;    ///< freed chunks the heap keeps (fragmentation), modelled
  double process_base = 0;  ///< libraries, MPI, HDF5, data buffers: measured, not modelled
  double peak_rss() const { return tensors + heap_slack + process_base; }
};

/// The process base assumed when none is measured: the peak resident memory less the tensor
/// peak of a one-layer width-8 gpt on 2 ranks, Debian 12, LibTorch 1.13, OpenMPI 4.1 (203 MiB).
constexpr double kDefaultProcessBaseBytes = 203.0 * 1024 * 1024;

/// The heap slack of a gpt run on a CPU host: the free space glibc's heap holds beside the live
/// tensors at the peak (every tensor lives in the heap: src/runtime/runtime.cpp). Three terms,
/// with coefficients per `mode` fitted by least squares on 8 gpt shapes x 3 modes, 3 runs of 2
/// ranks each, and checked on 2 held-out shapes (docs/BENCHMARKS.md, "Heap slack"):
/// one block's dense activations (`block.dense`; its forward and backward temporaries, allocated
/// around the live tensors), a share of every block's attention probabilities (`layers` x
/// `block.probabilities`; the largest tensors, whose freed places later allocations fit only in
/// part: the share is largest with kAttention, which frees them in every block's forward), and
/// about 1.5 times this device's weight bytes `weight_bytes` (the per-parameter gradients autograd
/// allocates before adding them into the flat buffer, the buffers MPI reduces the buckets in).
/// `block`: any mode's estimate (dense and probabilities do not depend on it). Local.
double gpt_heap_slack_bytes(const ActivationBytes& block, std::int64_t layers, RecomputeMode mode,
                            double weight_bytes);

/// "none", "block", "attention" (the model.recompute names). Local.
const char* recompute_name(RecomputeMode mode);

/// What the memory plan of one run needs beyond PlanInputs (docs/PLAN.md, "Memory").
struct MemoryInputs {
  int dp = 1;
  int tp = 1;
  bool shard = false;  ///< optimizer state sharded over dp (--shard-optimizer): as kOptimizer
  /// parallel.shard; a mode other than none wins over `shard`.
  ShardMode shard_mode = ShardMode::kNone;
  int shard_ranks = 0;                     ///< S, the ranks of one shard group; 0: dp
  bool reshard_after_forward = true;       ///< parallel.reshard_after_forward (full)
  double param_dtype_bytes = 4;            ///< parallel.param_dtype: the gathered copies (full)
  double reduce_dtype_bytes = 4;           ///< parallel.reduce_dtype (gradients, full)
  double bucket_bytes = 25.0 * (1 << 20);  ///< parallel.bucket_mb in bytes
  std::int64_t micro_batches = 1;          ///< optim.grad_accumulation: micro-batches per step
  Precision precision = Precision::kFp32;  ///< run.precision: the activations' element size
  double parameters_per_device = 0;        ///< logical parameters / (tp x pp)
  bool decoder = false;  ///< a decoder family's shape: activations are estimated for it only
  TransformerShape shape;
  std::int64_t heads = 0;
  std::int64_t micro_batch = 0;
  bool dropout = false;
  RecomputeMode recompute = RecomputeMode::kNone;

  /// The shard mode in effect: shard_mode, else optimizer when `shard`, else none. Local.
  ShardMode mode() const {
    return shard_mode != ShardMode::kNone ? shard_mode
           : shard                        ? ShardMode::kOptimizer
                                          : ShardMode::kNone;
  }
  /// S: the ranks that divide the state (the whole dp group unless shard_ranks says less). Local.
  int group() const { return shard_ranks > 0 ? shard_ranks : dp; }
};

/// Bytes one rank sends in one training step (docs/PLAN.md, "Communication"), counted as ring
/// collectives do: an all-reduce of X bytes over n ranks sends 2 X (n-1)/n, a reduce-scatter or an
/// all-gather X (n-1)/n.
struct StepCommunication {
  /// Parameter all-gathers within the shard group: the updated chunks (optimizer, gradients);
  /// under full each unit before its forward and, with reshard_after_forward, again before its
  /// backward, every micro-batch (at param_dtype).
  double gather = 0;
  /// The gradients: all-reduced over dp (none), else reduce-scattered within the shard group
  /// (at reduce_dtype under gradients and full; full reduce-scatters every micro-batch).
  double reduce = 0;
  /// Hybrid sharding (S < dp): the owned chunk all-reduced across the dp / S shard groups.
  double replicas = 0;
  /// Tensor parallelism: the gpt's activation all-reduces over tp (per micro-batch the
  /// embedding, 2 per block forward, 2 per block backward, the head's input gradient, 2 per
  /// block more with recompute block; the loss's small ones left out).
  double tensor_parallel = 0;
  double total() const { return gather + reduce + replicas + tensor_parallel; }
};

/// The communication of one step of `in` (its parameters_per_device, shard mode and group, tp,
/// and for the tp all-reduces the gpt shape and micro-batch). Throws ConfigError when the shard
/// group does not divide dp. Local.
StepCommunication step_communication(const MemoryInputs& in);

/// Every figure of the memory plan of one device.
struct MemoryPlan {
  MemoryInputs in;
  std::string optimizer;
  ParameterBytes run;       ///< this run's layout and sharding
  ParameterBytes other;     ///< the same with the optimizer state sharded the other way
  ParameterBytes mixed;     ///< bf16 weights with float32 master weights, this run's sharding
  ParameterBytes modes[4];  ///< this run's layout and S in every ShardMode (indexed by its value)
  double state_bytes = 0;   ///< weights + gradients + optimizer state on this device
  /// Activations of one micro-batch for each RecomputeMode (indexed by its value); gpt only.
  ActivationBytes activations[3];
  double run_activation_bytes = 0;  ///< the mode this run uses (0 without an estimate)
  /// The same on a CPU host, where dropout masks are as large as the activations.
  double host_activation_bytes = 0;
  /// full: the gathered units at param_dtype: two blocks (the one computing, the next one
  /// prefetched) and the root (the whole model when it is not a gpt).
  double gathered_bytes = 0;
  /// full: the unsharded gradients of one block and of the root during backward, at param_dtype.
  double gathered_gradient_bytes = 0;
  /// gradients: two buckets of gradients in flight (one filling, one being reduce-scattered),
  /// at most all the gradients. none and optimizer keep every gradient (the buckets are views).
  double bucket_in_flight_bytes = 0;
  double total_bytes = 0;        ///< the peak: state + this run's activations + the three above
  StepCommunication comm;        ///< bytes sent per step
  HostMemory host;               ///< peak resident memory on a CPU host
  bool host_base_given = false;  ///< host.process_base measured by the user (--host-base)
  double device_memory = 0;      ///< 0 = not given
  bool fits() const { return total_bytes <= device_memory; }
};

/// The memory plan for `optimizer` (optimizer_state_bytes_per_parameter names); `device_memory`
/// and `host_base` are bytes, 0 when not given (host_base then kDefaultProcessBaseBytes). Throws
/// ConfigError for impossible sizes. Local.
MemoryPlan make_memory_plan(const MemoryInputs& in, const std::string& optimizer,
                            double device_memory, double host_base);

/// Every number of the memory plan as JSON (`hpctrain plan --json`'s "memory"). Local.
nlohmann::ordered_json memory_plan_to_json(const MemoryPlan& plan);

/// The layout of `in` as config settings: "parallel.shard=full parallel.shard_group=8
/// parallel.tp=2 model.recompute=block" (shard_group dp when S is the whole dp group, left out
/// for none). Local.
std::string layout_settings(const MemoryInputs& in);

}  // namespace hpctrain::plan
