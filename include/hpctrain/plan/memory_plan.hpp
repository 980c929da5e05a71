#pragma once
// Memory per device of a training run (docs/PLAN.md, "Memory"): bytes per parameter for the
// weights, gradients and optimizer state with and without sharding the optimizer state over the
// data-parallel group (the table of Megatron-LM's distributed optimizer), and an estimate of the
// activations one micro-batch of hpctrain's gpt keeps for backward, with and without activation
// recomputation. Pure arithmetic: no LibTorch, MPI or HDF5. Local.

#include <cstdint>
#include <string>

#include "hpctrain/plan/compute_plan.hpp"

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

/// Bytes per parameter, split the way the state is kept.
struct ParameterBytes {
  double weights = 0;    ///< replicated over dp
  double gradients = 0;  ///< replicated over dp
  double sharded = 0;    ///< optimizer state (and master weights) per dp rank, after sharding
  /// Everything per parameter on one device.
  double total() const { return weights + gradients + sharded; }
};

/// Bytes per parameter for `optimizer` (optimizer_state_bytes_per_parameter names) on one device
/// of a dp group of `dp` ranks: with `shard`, the optimizer state (and master weights) is divided
/// by dp. float32 with Adam: 16 unsharded, 8 + 8 / dp sharded; bf16 with float32 master weights:
/// 18 vs 6 + 12 / dp. Throws ConfigError for dp < 1 or an unknown optimizer. Local.
ParameterBytes parameter_bytes(WeightLayout layout, const std::string& optimizer, int dp,
                               bool shard);

/// What the gpt keeps for backward (model.recompute).
enum class RecomputeMode { kNone, kBlock, kAttention };

/// Activations of one micro-batch of the gpt on one tp rank, in bytes.
struct ActivationBytes {
  double per_layer = 0;  ///< one block, as kept for backward
  double layers = 0;     ///< all blocks (with recomputation: their inputs, plus one block's
                         ///< full activations, which backward rebuilds one block at a time)
  double head = 0;       ///< embeddings, final norm, logits and the cross entropy
  double total() const { return layers + head; }
};

/// Estimate for micro-batch `batch` sequences of the shape's seq_len tokens, `heads` attention
/// heads, `tp` ranks, activations of `element_bytes` (4 float32, 2 bf16), and `dropout` > 0
/// (masks and dropped copies). Counts the tensors LibTorch saves for backward in the gpt's block
/// (model/gpt_block.cpp): per token 8 D + 2 F values of which 3 D + D + 2 F are split over tp,
/// plus heads x T attention probabilities (split over tp). Throws ConfigError for sizes < 1.
/// Local.
ActivationBytes gpt_activation_bytes(const TransformerShape& shape, std::int64_t heads,
                                     std::int64_t batch, int tp, double element_bytes, bool dropout,
                                     RecomputeMode mode);

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

/// The heap slack of a gpt run on a CPU host, calibrated on gpt-small and gpt-medium at 2 and 4
/// ranks (docs/BENCHMARKS.md, within 7% of peak RSS there): two blocks' activations as kept
/// without recomputation (`none`, the estimate for RecomputeMode::kNone) whatever `mode` keeps,
/// since one block's forward and backward temporaries are allocated and freed around the live
/// tensors however many blocks are kept; twice the weight bytes (`weight_bytes`, this device's),
/// for the per-parameter gradients autograd allocates before adding them into the flat buffer
/// and the buffers MPI allocates to reduce the buckets; with kAttention twice more the scores
/// and probabilities that each block rebuilds. Local.
double gpt_heap_slack_bytes(const ActivationBytes& none, const ActivationBytes& attention,
                            RecomputeMode mode, double weight_bytes);

/// "80GiB", "141 GB", "1.5e9" (bytes) -> bytes. Throws ConfigError naming `what`. Local.
double parse_bytes(const std::string& text, const std::string& what);

}  // namespace hpctrain::plan
