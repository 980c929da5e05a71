#pragma once
// The arithmetic of `hpctrain plan` (docs/PLAN.md): training and evaluation FLOPs, wall time and
// device-hours at a peak FLOP rate and utilisation (or at the rates a finished run measured),
// checkpoint size and write time, and the Young/Daly checkpoint interval. Everything here is
// local, pure and free of LibTorch, MPI and HDF5, so it is unit-tested on its own; reading
// configs and data files to fill PlanInputs is the command's job.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/runtime/task.hpp"

namespace hpctrain::plan {

/// A per-device peak FLOP/s figure with where it comes from (docs/PLAN.md lists them).
struct PeakFlopsPreset {
  std::string name;    ///< "h200-sxm-bf16"
  double flops_per_s;  ///< dense (no 2:4 sparsity), per device
  std::string source;  ///< "NVIDIA H200 datasheet, BF16 Tensor Core, dense"
};

/// The presets `--peak-flops NAME` accepts. Local.
const std::vector<PeakFlopsPreset>& peak_flops_presets();

/// "989e12", "1.5e13" or a preset name -> FLOP/s per device. Throws ConfigError naming `what` and
/// listing the presets. Local.
double parse_peak_flops(const std::string& text, const std::string& what);

/// The shape of a decoder-only transformer as hpctrain's models build it. The gpt
/// (model/gpt.hpp): pre-norm blocks of attention (QKV and output projection with biases) and an
/// MLP of mlp_ratio * width features, LayerNorms, learned positions. The llama family
/// (model/llama.hpp, `swiglu`): RMSNorm, grouped-query attention of `heads` query heads and
/// `kv_heads` key/value heads of `head_dim` (biases on q, k, v with qkv_bias, q/k RMSNorm with
/// qk_norm), a SwiGLU MLP of ffn_width features, rotary positions (no table). Both: a tied or
/// untied output head.
struct TransformerShape {
  std::int64_t layers = 0;
  std::int64_t width = 0;
  std::int64_t seq_len = 0;
  std::int64_t vocab_size = 0;
  double mlp_ratio = 4.0;
  bool tied_embeddings = true;
  // The llama family's block (swiglu); the gpt leaves these at their defaults.
  std::int64_t heads = 0;      ///< query heads
  std::int64_t kv_heads = 0;   ///< key/value heads (0: heads)
  std::int64_t head_dim = 0;   ///< 0: width / heads
  std::int64_t ffn_width = 0;  ///< SwiGLU features
  bool swiglu = false;         ///< the llama family's block
  bool qkv_bias = false;
  bool qk_norm = false;
};

/// Parameters of one block. gpt: 4 D^2 + 2 F D + 9 D + F (QKV, projection, MLP, biases, two
/// LayerNorms; F = mlp_ratio * D). llama: D (H + 2 KV) hd + H hd D + 3 F D + 2 D, plus
/// (H + 2 KV) hd with qkv_bias and 2 hd with qk_norm. Local.
double transformer_block_parameters(const TransformerShape& shape);
/// Parameters outside the embeddings and output head: the blocks plus the final norm (2 D for
/// the gpt's LayerNorm, D for the llama's RMSNorm). Local.
double transformer_non_embedding_parameters(const TransformerShape& shape);
/// Token embedding V D, positions T D (gpt only), and V D more for an untied output head. Local.
double transformer_embedding_parameters(const TransformerShape& shape);
/// Forward FLOPs per token: 2 N + 2 layers T width (N = non-embedding parameters; the attention
/// scores and the weighted sum of values, Kaplan et al. 2020, eq. 2.2). Local.
double transformer_forward_flops_per_token(double non_embedding_parameters, std::int64_t layers,
                                           std::int64_t seq_len, std::int64_t width);
/// Forward FLOPs per token of the output head's matrix product, 2 width vocab: the logits of every
/// position. Kaplan's 2 N leaves it out with the embeddings, yet it is a matrix product like the
/// blocks' (29% of gpt2-124m's matrix-product work), so throughput and MFU count it. Local.
double transformer_head_flops_per_token(std::int64_t width, std::int64_t vocab);
/// Forward FLOPs per token of `shape` at its seq_len. gpt: the above plus
/// transformer_head_flops_per_token. llama: 2 (N + V D) +
/// 4 layers T H hd: every matrix including the output head (tied or not: the head is a matmul
/// either way; the embedding lookup is not), plus the scores q k^T and the weighted sum of v,
/// 2 T H hd each (PaLM's count, Chowdhery et al. 2022, appendix B; causal masking not
/// discounted). Training is 3x. Local.
double transformer_forward_flops_per_token(const TransformerShape& shape);

/// Training FLOPs of a transformer: 6 N D (forward 2 N D, backward 4 N D). Local.
double transformer_training_flops(double parameters, double tokens);
/// Evaluation FLOPs of a transformer (forward only): 2 N D. Local.
double transformer_eval_flops(double parameters, double tokens);
/// Training FLOPs of any model: 3 x forward (backward costs twice the forward). Local.
double training_flops(double forward_flops_per_sample, double samples);

/// Optimizer steps of a run as the trainer counts them: floor(samples / global batch) per epoch
/// times epochs, capped by max_steps when that is > 0. Local.
std::int64_t planned_steps(std::int64_t samples_per_epoch, std::int64_t global_batch,
                           std::int64_t epochs, std::int64_t max_steps);
/// Evaluations of a run as the trainer schedules them: one every `every_steps` steps (0: none)
/// plus one at the end when `at_end` and the last step is not already one. Local.
std::int64_t planned_evaluations(std::int64_t steps, std::int64_t every_steps, bool at_end);

/// Bytes of optimizer state per parameter, all fp32: "sgd" 0, "sgd-momentum" 4 (momentum
/// buffer), "adam" and "adamw" 8 (exp_avg, exp_avg_sq). Throws ConfigError for another name.
/// Local.
double optimizer_state_bytes_per_parameter(const std::string& optimizer);

/// The checkpoint interval that minimises lost work, and what it costs (first order, valid while
/// the save time is small against the MTBF).
struct CheckpointInterval {
  double interval_s = 0;       ///< Young/Daly: sqrt(2 x save time x MTBF)
  double save_fraction = 0;    ///< save time / interval: time spent writing checkpoints
  double rework_fraction = 0;  ///< interval / (2 MTBF): work redone after failures
  double waste_fraction = 0;   ///< both; sqrt(2 x save time / MTBF) at the optimum
};

/// Young (1974) / Daly (2006, first order) interval for `save_s` seconds per checkpoint and a
/// mean time between failures of the whole job of `mtbf_s` seconds. Throws ConfigError unless
/// both are positive. Local.
CheckpointInterval young_daly(double save_s, double mtbf_s);

/// What a finished run measured, read from its ledger.json (train/ledger.hpp).
struct LedgerCalibration {
  std::string origin;  ///< the ledger's path, for messages
  std::string model_name;
  std::int64_t parameters = 0;
  int world_size = 1;
  int tp = 1;
  int threads_per_rank = 1;
  std::string device;
  std::int64_t steps = 0;
  std::int64_t samples_trained = 0;
  std::int64_t samples_evaluated = 0;
  double forward_flops_per_sample = 0;
  double train_flops = 0;        ///< flops.train_total
  double eval_flops = 0;         ///< flops.eval_total
  double train_wall_s = 0;       ///< wall_seconds.train_loop
  double eval_wall_s = 0;        ///< wall_seconds.eval
  double checkpoint_wall_s = 0;  ///< rank_seconds.checkpoint / world size
  double total_wall_s = 0;       ///< wall_seconds.total
  /// total - train loop - eval - checkpoint: setup (model, data, communicators) and the rest.
  double overhead_s = 0;
  /// Achieved training FLOP/s per device (rank): train FLOPs / train wall / world size.
  double train_flops_per_s_per_device = 0;
  /// Achieved evaluation FLOP/s per device; 0 when the run did not evaluate.
  double eval_flops_per_s_per_device = 0;
  /// Seconds per trained sample over seconds per evaluated sample (FLOPs predict 3).
  double cost_ratio_train_to_eval = 0;
};

/// Reads the fields above from a parsed ledger.json; throws ConfigError naming `origin` and the
/// missing or malformed field, or a run that trained no steps. Local.
LedgerCalibration read_ledger_calibration(const nlohmann::json& ledger, const std::string& origin);

/// Everything a plan is computed from. Sizes are doubles: planned runs may exceed 2^63 FLOPs.
struct PlanInputs {
  // The model.
  std::string model_name;  ///< "gpt", "mlp", "transformer" (size arguments) ...
  Task task = Task::kClassification;
  std::string source;                   ///< "config FILE" or "size arguments"
  std::string flops_formula;            ///< how forward_flops_per_sample was obtained, in words
  double parameters = 0;                ///< all parameters (checkpoint size)
  double non_embedding_parameters = 0;  ///< transformers: the N of 6 N D; 0 = not applicable
  double forward_flops_per_sample = 0;
  double tokens_per_sample = 1;  ///< sequence length for language models

  // The work.
  double epochs = 1;
  double samples_per_epoch = 0;   ///< 0 when only the total is known
  double train_samples = 0;       ///< over the whole run, all data-parallel ranks
  std::int64_t steps = 0;         ///< optimizer steps (0 = not known: size arguments)
  std::int64_t global_batch = 0;  ///< samples per step (0 = not known)
  double eval_samples_per_pass = 0;
  double eval_passes = 0;

  // The machine.
  int devices = 1;
  double peak_flops_per_device = 0;  ///< 0 = not given
  double utilization = 0.4;          ///< model FLOPs utilisation assumed for training
  double eval_utilization = 0;       ///< 0 = same as utilization
  /// When set, the measured rates, eval cost and overhead replace the assumed ones.
  std::optional<LedgerCalibration> calibration;

  // Checkpoints and failures.
  std::string optimizer = "adam";
  double checkpoint_bandwidth = 1e9;  ///< bytes/s
  double mtbf_s = 0;                  ///< 0 = not given
};

/// A computed plan: the inputs plus every derived figure (docs/PLAN.md defines each).
struct ComputePlan {
  PlanInputs in;
  double train_tokens = 0;
  double eval_tokens_per_pass = 0;
  double train_flops = 0;
  double eval_flops_per_pass = 0;
  double eval_flops = 0;  ///< all passes
  /// Rates per device that the times use; 0 when neither a peak nor a calibration was given.
  double train_flops_per_s_per_device = 0;
  double eval_flops_per_s_per_device = 0;
  std::string rate_source;  ///< "peak x utilization", "calibrated", or "none"
  double utilization = 0;   ///< used or measured MFU; 0 when no peak is known
  double eval_utilization = 0;
  bool timed = false;  ///< whether the times below are known
  double train_wall_s = 0;
  double eval_wall_per_pass_s = 0;
  double eval_wall_s = 0;
  double overhead_s = 0;  ///< calibrated setup and other fixed time; 0 otherwise
  double total_wall_s = 0;
  double step_s = 0;  ///< 0 when steps are not known
  double train_device_hours = 0;
  double eval_device_hours = 0;
  double total_device_hours = 0;
  double bytes_per_parameter = 0;
  double checkpoint_bytes = 0;
  double checkpoint_write_s = 0;
  std::optional<CheckpointInterval> interval;  ///< when an MTBF was given
  double interval_steps = 0;                   ///< the interval in steps, when step_s is known
  double expected_failures = 0;                ///< total wall / MTBF, when both are known
  std::vector<std::string> notes;              ///< assumptions and warnings, in words
};

/// Computes the plan. Throws ConfigError for impossible inputs (no work, devices < 1,
/// utilisation outside (0, 1], negative sizes). Local.
ComputePlan make_plan(const PlanInputs& inputs);

/// Every number of the plan as JSON (the layout docs/PLAN.md documents). Local.
nlohmann::ordered_json plan_to_json(const ComputePlan& plan);

/// What a calibration measured, as `hpctrain plan --json` reports it ("calibration"), with its
/// achieved utilisation of `peak_flops` (null when 0). Local.
nlohmann::ordered_json calibration_to_json(const LedgerCalibration& c, double peak_flops);

/// The evaluation of a plan in int8, from the int8 / float32 speed ratio measured on the same
/// model (`speedup` > 1 is faster): the float32 evaluation times and device-hours divided by it.
struct Int8Evaluation {
  double speedup = 1;
  double eval_wall_per_pass_s = 0;
  double eval_wall_s = 0;
  double eval_device_hours = 0;
};

/// Throws ConfigError unless the plan has a finite, timed float32 evaluation and speedup > 0.
/// Local.
Int8Evaluation int8_evaluation(const ComputePlan& plan, double speedup);

/// Relative error (predicted - actual) / actual; 0 when actual is 0. Local.
double relative_error(double predicted, double actual);

}  // namespace hpctrain::plan
