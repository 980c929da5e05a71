#include "hpctrain/plan/compute_plan.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {

const std::vector<PeakFlopsPreset>& peak_flops_presets() {
  // Vendor datasheet figures per GPU, dense: the datasheets print the 2:4-sparsity figure
  // (twice these) for Tensor Core rates. fp32 presets are the non-Tensor-Core rate, which is
  // what LibTorch's fp32 matrix products run at unless TF32 is enabled.
  static const std::vector<PeakFlopsPreset> presets = {
      {"h200-sxm-bf16", 989e12,
       "NVIDIA H200 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity"},
      {"h200-sxm-fp32", 67e12, "NVIDIA H200 SXM datasheet: FP32 67 TFLOPS"},
      {"h100-sxm-bf16", 989e12,
       "NVIDIA H100 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity"},
      {"h100-sxm-fp32", 67e12, "NVIDIA H100 SXM datasheet: FP32 67 TFLOPS"},
      {"a100-sxm-bf16", 312e12,
       "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS (624 with sparsity)"},
      {"a100-sxm-fp32", 19.5e12, "NVIDIA A100 datasheet: FP32 19.5 TFLOPS"},
  };
  return presets;
}

double parse_peak_flops(const std::string& text, const std::string& what) {
  std::string lower = text;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& preset : peak_flops_presets()) {
    if (preset.name == lower) return preset.flops_per_s;
  }
  std::string names;
  for (const auto& preset : peak_flops_presets())
    names += (names.empty() ? "" : ", ") + preset.name;
  std::size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != text.size() || !(value > 0) || !std::isfinite(value)) {
    throw ConfigError(str(what, " = '", text,
                          "': not a positive FLOP/s figure per device (e.g. 989e12) or a "
                          "preset (",
                          names, ")"));
  }
  return value;
}

double transformer_block_parameters(const TransformerShape& s) {
  const double d = static_cast<double>(s.width);
  if (!s.swiglu) {
    const double f = std::round(static_cast<double>(s.width) * s.mlp_ratio);
    return 4 * d * d + 2 * f * d + 9 * d + f;
  }
  const double h = static_cast<double>(s.heads);
  const double kv = static_cast<double>(s.kv_heads > 0 ? s.kv_heads : s.heads);
  const double hd = static_cast<double>(s.head_dim > 0 ? s.head_dim : s.width / s.heads);
  const double f = static_cast<double>(s.ffn_width);
  double n = d * (h + 2 * kv) * hd + h * hd * d + 3 * f * d + 2 * d;
  if (s.qkv_bias) n += (h + 2 * kv) * hd;
  if (s.qk_norm) n += 2 * hd;
  return n;
}

double transformer_non_embedding_parameters(const TransformerShape& s) {
  const double d = static_cast<double>(s.width);
  return static_cast<double>(s.layers) * transformer_block_parameters(s) + (s.swiglu ? d : 2 * d);
}

double transformer_embedding_parameters(const TransformerShape& s) {
  const double d = static_cast<double>(s.width);
  const double v = static_cast<double>(s.vocab_size);
  const double positions = s.swiglu ? 0.0 : static_cast<double>(s.seq_len) * d;
  return v * d + positions + (s.tied_embeddings ? 0.0 : v * d);
}

double transformer_forward_flops_per_token(const TransformerShape& s) {
  const double n = transformer_non_embedding_parameters(s);
  if (!s.swiglu) {
    return transformer_forward_flops_per_token(n, s.layers, s.seq_len, s.width) +
           transformer_head_flops_per_token(s.width, s.vocab_size);
  }
  const double hd = static_cast<double>(s.head_dim > 0 ? s.head_dim : s.width / s.heads);
  const double head = static_cast<double>(s.vocab_size) * static_cast<double>(s.width);
  return 2.0 * (n + head) + 4.0 * static_cast<double>(s.layers) * static_cast<double>(s.seq_len) *
                                static_cast<double>(s.heads) * hd;
}

double transformer_forward_flops_per_token(double non_embedding_parameters, std::int64_t layers,
                                           std::int64_t seq_len, std::int64_t width) {
  return 2.0 * non_embedding_parameters + 2.0 * static_cast<double>(layers) *
                                              static_cast<double>(seq_len) *
                                              static_cast<double>(width);
}

double transformer_head_flops_per_token(std::int64_t width, std::int64_t vocab) {
  return 2.0 * static_cast<double>(width) * static_cast<double>(vocab);
}

double transformer_training_flops(double parameters, double tokens) {
  return 6.0 * parameters * tokens;
}

double transformer_eval_flops(double parameters, double tokens) {
  return 2.0 * parameters * tokens;
}

double training_flops(double forward_flops_per_sample, double samples) {
  return 3.0 * forward_flops_per_sample * samples;
}

std::int64_t planned_steps(std::int64_t samples_per_epoch, std::int64_t global_batch,
                           std::int64_t epochs, std::int64_t max_steps) {
  if (global_batch < 1) return 0;
  std::int64_t steps = samples_per_epoch / global_batch * epochs;
  if (max_steps > 0) steps = std::min(steps, max_steps);
  return steps;
}

std::int64_t planned_evaluations(std::int64_t steps, std::int64_t every_steps, bool at_end) {
  if (steps < 1) return 0;
  std::int64_t n = every_steps > 0 ? steps / every_steps : 0;
  const bool last_is_periodic = every_steps > 0 && steps % every_steps == 0;
  if (at_end && !last_is_periodic) ++n;
  return n;
}

double optimizer_state_bytes_per_parameter(const std::string& optimizer) {
  if (optimizer == "sgd") return 0;
  if (optimizer == "sgd-momentum") return 4;
  if (optimizer == "adam" || optimizer == "adamw") return 8;
  throw ConfigError(str("optimizer '", optimizer,
                        "': unknown; use sgd, sgd-momentum, adam or adamw (sets the optimizer "
                        "state a checkpoint holds per parameter)"));
}

CheckpointInterval young_daly(double save_s, double mtbf_s) {
  if (!(save_s > 0) || !(mtbf_s > 0)) {
    throw ConfigError(str("Young/Daly interval: save time (", save_s, " s) and MTBF (", mtbf_s,
                          " s) must both be positive"));
  }
  CheckpointInterval c;
  c.interval_s = std::sqrt(2.0 * save_s * mtbf_s);
  c.save_fraction = save_s / c.interval_s;
  c.rework_fraction = c.interval_s / (2.0 * mtbf_s);
  c.waste_fraction = c.save_fraction + c.rework_fraction;
  return c;
}

namespace {

// The node at "a.b.c", or null when a key on the way is missing.
const nlohmann::json* find_field(const nlohmann::json& ledger, const std::string& dotted) {
  const nlohmann::json* node = &ledger;
  std::size_t start = 0;
  while (start <= dotted.size()) {
    std::size_t dot = dotted.find('.', start);
    if (dot == std::string::npos) dot = dotted.size();
    const std::string key = dotted.substr(start, dot - start);
    if (!node->is_object() || !node->contains(key)) return nullptr;
    node = &(*node)[key];
    start = dot + 1;
  }
  return node;
}

double number(const nlohmann::json& ledger, const std::string& dotted, const std::string& origin) {
  const nlohmann::json* value = find_field(ledger, dotted);
  if (!value) {
    throw ConfigError(str(origin, ": no field '", dotted,
                          "'; calibrate on the ledger.json that hpctrain train writes into a "
                          "finished run's directory"));
  }
  if (!value->is_number()) {
    throw ConfigError(str(origin, ": field '", dotted, "' is ", value->dump(), ", not a number"));
  }
  return value->get<double>();
}

std::string text(const nlohmann::json& ledger, const std::string& dotted) {
  const nlohmann::json* value = find_field(ledger, dotted);
  return value && value->is_string() ? value->get<std::string>() : "";
}

}  // namespace

LedgerCalibration read_ledger_calibration(const nlohmann::json& ledger, const std::string& origin) {
  LedgerCalibration c;
  c.origin = origin;
  c.model_name = text(ledger, "model.name");
  c.device = text(ledger, "grid.device");
  c.parameters = static_cast<std::int64_t>(number(ledger, "model.parameters", origin));
  c.world_size = static_cast<int>(number(ledger, "grid.world_size", origin));
  c.tp = static_cast<int>(number(ledger, "grid.tp", origin));
  c.threads_per_rank = static_cast<int>(number(ledger, "grid.threads_per_rank", origin));
  c.steps = static_cast<std::int64_t>(number(ledger, "steps", origin));
  c.samples_trained = static_cast<std::int64_t>(number(ledger, "samples_trained", origin));
  c.samples_evaluated = static_cast<std::int64_t>(number(ledger, "samples_evaluated", origin));
  c.forward_flops_per_sample = number(ledger, "flops.forward_per_sample", origin);
  c.train_flops = number(ledger, "flops.train_total", origin);
  c.eval_flops = number(ledger, "flops.eval_total", origin);
  c.train_wall_s = number(ledger, "wall_seconds.train_loop", origin);
  c.total_wall_s = number(ledger, "wall_seconds.total", origin);
  c.cost_ratio_train_to_eval = number(ledger, "cost_ratio_train_to_eval.measured", origin);
  if (c.world_size < 1) throw ConfigError(str(origin, ": grid.world_size must be at least 1"));
  // Rank-seconds / ranks is the wall time of a phase (ranks run in lock step); the evaluation's
  // rank-seconds include its bookkeeping, so the phases add up to wall_seconds.total.
  c.eval_wall_s = number(ledger, "rank_seconds.eval", origin) / c.world_size;
  c.checkpoint_wall_s = number(ledger, "rank_seconds.checkpoint", origin) / c.world_size;
  if (c.steps < 1 || !(c.train_wall_s > 0) || !(c.train_flops > 0)) {
    throw ConfigError(str(origin, ": the run trained ", c.steps, " steps in ", c.train_wall_s,
                          " s; calibrate on a run that trained at least a few hundred steps"));
  }
  c.overhead_s =
      std::max(0.0, c.total_wall_s - c.train_wall_s - c.eval_wall_s - c.checkpoint_wall_s);
  c.train_flops_per_s_per_device = c.train_flops / c.train_wall_s / c.world_size;
  if (c.samples_evaluated > 0 && c.eval_wall_s > 0 && c.eval_flops > 0) {
    c.eval_flops_per_s_per_device = c.eval_flops / c.eval_wall_s / c.world_size;
  }
  return c;
}

double relative_error(double predicted, double actual) {
  return actual != 0 ? (predicted - actual) / actual : 0.0;
}

ComputePlan make_plan(const PlanInputs& inputs) {
  ComputePlan p;
  p.in = inputs;
  const PlanInputs& in = p.in;
  if (in.devices < 1) throw ConfigError(str("devices = ", in.devices, ": must be at least 1"));
  if (!(in.forward_flops_per_sample > 0)) {
    throw ConfigError(
        "the model's forward FLOPs per sample are unknown: give --config, --params (with "
        "--tokens), or --forward-flops (with --samples)");
  }
  if (!(in.train_samples > 0)) {
    throw ConfigError(
        "nothing to train: give the training data (data.train in the config, --samples or "
        "--tokens) and at least one epoch or step");
  }
  if (!(in.utilization > 0) || in.utilization > 1) {
    throw ConfigError(str("utilization = ", in.utilization, ": must be in (0, 1]"));
  }
  if (in.eval_utilization < 0 || in.eval_utilization > 1) {
    throw ConfigError(str("eval utilization = ", in.eval_utilization, ": must be in (0, 1]"));
  }
  if (in.peak_flops_per_device < 0) throw ConfigError("peak FLOP/s must be positive");
  if (!(in.checkpoint_bandwidth > 0)) {
    throw ConfigError(
        str("checkpoint bandwidth = ", in.checkpoint_bandwidth, " bytes/s: must be positive"));
  }
  if (in.mtbf_s < 0) throw ConfigError("MTBF must be positive");
  if (in.eval_samples_per_pass < 0 || in.eval_passes < 0 || in.parameters < 0) {
    throw ConfigError("sizes must not be negative");
  }

  p.train_tokens = in.train_samples * in.tokens_per_sample;
  p.eval_tokens_per_pass = in.eval_samples_per_pass * in.tokens_per_sample;
  p.train_flops = training_flops(in.forward_flops_per_sample, in.train_samples);
  p.eval_flops_per_pass = in.forward_flops_per_sample * in.eval_samples_per_pass;
  p.eval_flops = p.eval_flops_per_pass * in.eval_passes;

  const double devices = static_cast<double>(in.devices);
  if (in.calibration) {
    const LedgerCalibration& c = *in.calibration;
    p.rate_source = "calibrated";
    p.train_flops_per_s_per_device = c.train_flops_per_s_per_device;
    p.eval_flops_per_s_per_device = c.eval_flops_per_s_per_device;
    if (!(p.eval_flops_per_s_per_device > 0)) {
      p.eval_flops_per_s_per_device = p.train_flops_per_s_per_device;
      if (p.eval_flops > 0) {
        p.notes.push_back(
            "the calibrating run did not evaluate: evaluation is timed at its training FLOP rate");
      }
    }
    p.overhead_s = c.overhead_s;
    if (in.peak_flops_per_device > 0) {
      p.utilization = p.train_flops_per_s_per_device / in.peak_flops_per_device;
      p.eval_utilization = p.eval_flops_per_s_per_device / in.peak_flops_per_device;
    }
    if (c.world_size != in.devices) {
      p.notes.push_back(str("calibrated on ", c.world_size, " ranks, planned for ", in.devices,
                            ": assumes each device keeps its measured FLOP rate (perfect "
                            "scaling); calibrate at the planned size when you can"));
    }
    if (!c.model_name.empty() && c.model_name != in.model_name) {
      p.notes.push_back(str("calibrated on a ", c.model_name, " run, planned for ", in.model_name,
                            ": FLOP rates differ between models; calibrate on the same model"));
    }
  } else if (in.peak_flops_per_device > 0) {
    p.rate_source = "peak x utilization";
    p.utilization = in.utilization;
    p.eval_utilization = in.eval_utilization > 0 ? in.eval_utilization : in.utilization;
    p.train_flops_per_s_per_device = in.peak_flops_per_device * p.utilization;
    p.eval_flops_per_s_per_device = in.peak_flops_per_device * p.eval_utilization;
  } else {
    p.rate_source = "none";
    p.notes.push_back(
        "no times: give --peak-flops (per device; a number or a preset) with --utilization, or "
        "--calibrate RUN_DIR to use what a finished run achieved");
  }

  p.timed = p.train_flops_per_s_per_device > 0;
  if (p.timed) {
    p.train_wall_s = p.train_flops / (devices * p.train_flops_per_s_per_device);
    p.eval_wall_per_pass_s = p.eval_flops_per_pass / (devices * p.eval_flops_per_s_per_device);
    p.eval_wall_s = p.eval_wall_per_pass_s * in.eval_passes;
    p.total_wall_s = p.train_wall_s + p.eval_wall_s + p.overhead_s;
    if (in.steps > 0) p.step_s = p.train_wall_s / static_cast<double>(in.steps);
    p.train_device_hours = p.train_wall_s * devices / 3600.0;
    p.eval_device_hours = p.eval_wall_s * devices / 3600.0;
    p.total_device_hours = p.total_wall_s * devices / 3600.0;
  }

  p.bytes_per_parameter = 4.0 + optimizer_state_bytes_per_parameter(in.optimizer);
  p.checkpoint_bytes = in.parameters * p.bytes_per_parameter;
  p.checkpoint_write_s = p.checkpoint_bytes / in.checkpoint_bandwidth;
  if (in.mtbf_s > 0 && p.checkpoint_write_s > 0) {
    p.interval = young_daly(p.checkpoint_write_s, in.mtbf_s);
    if (p.step_s > 0) p.interval_steps = p.interval->interval_s / p.step_s;
    if (p.timed) p.expected_failures = p.total_wall_s / in.mtbf_s;
    if (p.checkpoint_write_s > 0.5 * in.mtbf_s) {
      p.notes.push_back(
          "the checkpoint takes more than half the MTBF to write: the first-order Young/Daly "
          "interval does not hold; write faster or to a burst buffer");
    }
  }
  return p;
}

namespace {

// JSON null for figures that are unknown (no times without a rate, no interval without MTBF).
nlohmann::json known(bool is_known, double value) {
  return is_known ? nlohmann::json(value) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::ordered_json plan_to_json(const ComputePlan& p) {
  const PlanInputs& in = p.in;
  nlohmann::ordered_json j;
  j["model"] = {{"name", in.model_name},
                {"task", task_name(in.task)},
                {"source", in.source},
                {"parameters", in.parameters},
                {"non_embedding_parameters",
                 known(in.non_embedding_parameters > 0, in.non_embedding_parameters)},
                {"forward_flops_per_sample", in.forward_flops_per_sample},
                {"tokens_per_sample", in.tokens_per_sample},
                {"flops_formula", in.flops_formula}};
  j["workload"] = {
      {"epochs", in.epochs},
      {"samples_per_epoch", known(in.samples_per_epoch > 0, in.samples_per_epoch)},
      {"global_batch", known(in.global_batch > 0, static_cast<double>(in.global_batch))},
      {"steps", known(in.steps > 0, static_cast<double>(in.steps))},
      {"train_samples", in.train_samples},
      {"train_tokens", p.train_tokens},
      {"eval_samples_per_pass", in.eval_samples_per_pass},
      {"eval_tokens_per_pass", p.eval_tokens_per_pass},
      {"eval_passes", in.eval_passes}};
  j["flops"] = {{"train_per_sample", 3.0 * in.forward_flops_per_sample},
                {"eval_per_sample", in.forward_flops_per_sample},
                {"train", p.train_flops},
                {"eval_per_pass", p.eval_flops_per_pass},
                {"eval", p.eval_flops},
                {"total", p.train_flops + p.eval_flops}};
  j["devices"] = {
      {"count", in.devices},
      {"peak_flops_per_device", known(in.peak_flops_per_device > 0, in.peak_flops_per_device)},
      {"rate_source", p.rate_source},
      {"utilization", known(p.utilization > 0, p.utilization)},
      {"eval_utilization", known(p.eval_utilization > 0, p.eval_utilization)},
      {"train_flops_per_s_per_device", known(p.timed, p.train_flops_per_s_per_device)},
      {"eval_flops_per_s_per_device", known(p.timed, p.eval_flops_per_s_per_device)}};
  j["time"] = {{"train_wall_s", known(p.timed, p.train_wall_s)},
               {"eval_wall_per_pass_s", known(p.timed, p.eval_wall_per_pass_s)},
               {"eval_wall_s", known(p.timed, p.eval_wall_s)},
               {"overhead_s", known(p.timed, p.overhead_s)},
               {"total_wall_s", known(p.timed, p.total_wall_s)},
               {"step_s", known(p.step_s > 0, p.step_s)},
               {"train_device_hours", known(p.timed, p.train_device_hours)},
               {"eval_device_hours", known(p.timed, p.eval_device_hours)},
               {"total_device_hours", known(p.timed, p.total_device_hours)}};
  const bool has_interval = p.interval.has_value();
  j["checkpoint"] = {
      {"optimizer", in.optimizer},
      {"bytes_per_parameter", p.bytes_per_parameter},
      {"bytes", p.checkpoint_bytes},
      {"bandwidth_bytes_per_s", in.checkpoint_bandwidth},
      {"write_s", p.checkpoint_write_s},
      {"mtbf_s", known(in.mtbf_s > 0, in.mtbf_s)},
      {"young_daly_interval_s", known(has_interval, has_interval ? p.interval->interval_s : 0)},
      {"interval_steps", known(p.interval_steps > 0, p.interval_steps)},
      {"save_fraction", known(has_interval, has_interval ? p.interval->save_fraction : 0)},
      {"rework_fraction", known(has_interval, has_interval ? p.interval->rework_fraction : 0)},
      {"waste_fraction", known(has_interval, has_interval ? p.interval->waste_fraction : 0)},
      {"expected_failures", known(has_interval && p.timed, p.expected_failures)}};
  j["notes"] = p.notes;
  return j;
}

nlohmann::ordered_json calibration_to_json(const LedgerCalibration& c, double peak_flops) {
  nlohmann::ordered_json cal;
  cal["model"] = c.model_name;
  cal["world_size"] = c.world_size;
  cal["threads_per_rank"] = c.threads_per_rank;
  cal["device"] = c.device;
  cal["steps"] = c.steps;
  cal["samples_trained"] = c.samples_trained;
  cal["samples_evaluated"] = c.samples_evaluated;
  cal["train_wall_s"] = c.train_wall_s;
  cal["eval_wall_s"] = c.eval_wall_s;
  cal["checkpoint_wall_s"] = c.checkpoint_wall_s;
  cal["overhead_s"] = c.overhead_s;
  cal["total_wall_s"] = c.total_wall_s;
  cal["train_flops_per_s_per_device"] = c.train_flops_per_s_per_device;
  cal["eval_flops_per_s_per_device"] = c.eval_flops_per_s_per_device;
  cal["utilization"] = peak_flops > 0 ? nlohmann::json(c.train_flops_per_s_per_device / peak_flops)
                                      : nlohmann::json(nullptr);
  cal["cost_ratio_train_to_eval"] = c.cost_ratio_train_to_eval;
  return cal;
}

Int8Evaluation int8_evaluation(const ComputePlan& plan, double speedup) {
  if (!plan.timed || !(plan.eval_wall_per_pass_s > 0) || !std::isfinite(plan.eval_wall_s)) {
    throw ConfigError(
        "an int8 evaluation estimate scales the float32 evaluation time, and this plan has none: "
        "it must be timed and evaluate");
  }
  if (!(speedup > 0) || !std::isfinite(speedup)) {
    throw ConfigError(str("int8 / float32 evaluation speed ratio ", speedup, ": must be > 0"));
  }
  Int8Evaluation e;
  e.speedup = speedup;
  e.eval_wall_per_pass_s = plan.eval_wall_per_pass_s / speedup;
  e.eval_wall_s = plan.eval_wall_s / speedup;
  e.eval_device_hours = plan.eval_device_hours / speedup;
  return e;
}

}  // namespace hpctrain::plan
