#pragma once
// The compute ledger: where the rank-seconds of a run went (forward, backward, optimizer,
// communication wait, data wait, evaluation, checkpointing), what the model costs in FLOPs per
// training and evaluation sample, what the run achieved, and the measured cost ratio of training
// to evaluation. Written to <run_dir>/ledger.json and summarised on rank 0 at the end.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "hpctrain/runtime/precision.hpp"
#include "hpctrain/runtime/task.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::train {

/// Seconds this rank spent in each phase. Local value type.
struct PhaseSeconds {
  double forward = 0;
  double backward = 0;
  double optimizer = 0;
  double comm_wait = 0;
  double data_wait = 0;
  double eval = 0;
  double checkpoint = 0;
  double train_wall = 0;  ///< wall time of the training loop (steps), excluding eval/checkpoints
  double total_wall = 0;  ///< whole run, setup included
  /// Pipeline stages: time waiting for the neighbouring stages' activations and gradients (the
  /// bubble as this rank sees it), and the wall time of the schedules it waited within.
  double pipeline_wait = 0;
  double pipeline_wall = 0;
};

/// What the ledger needs to know about the run besides the timings.
struct LedgerFacts {
  std::string model_name;
  Task task = Task::kClassification;
  std::int64_t parameters = 0;
  double forward_flops_per_sample = 0;
  /// Where forward_flops_per_sample came from (Model::flops_source()).
  std::string flops_source = "counted from the layers";
  std::int64_t tokens_per_sample = 1;  ///< sequence length for language models
  std::int64_t steps = 0;
  std::int64_t samples_trained = 0;  ///< over all data-parallel ranks
  std::int64_t samples_evaluated = 0;
  double eval_seconds_total = 0;  ///< wall seconds of all evaluations
  int world_size = 1;
  int dp = 1;
  int tp = 1;
  int pp = 1;
  /// With pp > 1: the schedule, chunks per rank, micro-batches per step and the bubble fraction
  /// the arithmetic predicts for them (docs/PIPELINE.md).
  std::string pp_schedule;
  int pp_virtual = 1;
  int micro_batches = 1;
  double predicted_bubble_fraction = 0;
  int threads_per_rank = 1;
  std::string device;
  Precision precision = Precision::kFp32;  ///< run.precision
  /// TF32 for float32 CUDA work (run.tf32, else LibTorch's default): matmul, cuDNN, and which.
  bool tf32_matmul = false;
  bool tf32_cudnn = true;
  std::string tf32_source = "LibTorch default";
  std::int64_t skipped_steps = 0;  ///< steps of the run skipped for non-finite gradients
  double loss_scale = 0;           ///< the loss scale at the end (0: no loss scaling)
  std::int64_t peak_device_memory_bytes = -1;  ///< this rank's, from the resource monitor
  /// This rank's most host-tensor bytes alive at once (the counting CPU allocator; -1 unknown).
  std::int64_t peak_tensor_bytes = -1;
  /// The straggler detector's summary (StragglerDetector::summary; rank 0), null: none.
  nlohmann::ordered_json stragglers;
  /// Bytes this rank holds for training state (flat buffers, padding included) and the
  /// activations of one micro-batch as docs/PLAN.md estimates them (gpt only; 0 otherwise).
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  double activation_bytes_estimate = 0;
  bool shard_optimizer = false;
  std::string shard = "none";  ///< parallel.shard
  /// Data-parallel communication of one step, bytes this rank hands to the collectives.
  std::int64_t dp_all_reduce_bytes = 0;
  std::int64_t dp_reduce_scatter_bytes = 0;
  std::int64_t dp_all_gather_bytes = 0;
  std::string recompute = "none";
  /// Which kernels ran the steps: the optimizer's update (Optimizer::kernel()) and the language
  /// model loss ("vocab parallel", "libtorch"; empty for other tasks).
  std::string optimizer_kernel;
  std::string cross_entropy_kernel;
};

/// Builds the ledger from every rank's phase times (rank-seconds are sums over ranks, and each
/// rank's own in "rank_seconds_per_rank") and peak resident (and device) memory. Collective over
/// `world`; the returned JSON is complete on every rank.
nlohmann::ordered_json build_ledger(const PhaseSeconds& mine, const LedgerFacts& facts,
                                    comm::ControlPlane& world);

/// A few lines for the end-of-run summary. Local.
std::string ledger_summary(const nlohmann::ordered_json& ledger);

/// Peak resident set size of this process in bytes. Local.
std::int64_t peak_rss_bytes();

}  // namespace hpctrain::train
