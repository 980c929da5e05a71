// hpctrain plan: what a run will cost before it starts (FLOPs, wall time, device-hours,
// checkpoint size and interval), from a config or from size arguments, optionally calibrated on a
// finished run's ledger.json. docs/PLAN.md documents every figure. Local: no collective runs;
// under a launcher every rank computes the same plan and rank 0 prints it.

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "command.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/memory_plan.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/plan/size_arguments.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/train_config.hpp"
#include "output.hpp"

namespace hpctrain::cli {
namespace {

using plan::ComputePlan;
using plan::LedgerCalibration;
using plan::PlanInputs;

struct PlanOptions {
  std::string config;
  std::vector<std::string> overrides;
  /// The model's size (without --config) and the work (with or without it).
  plan::SizeArguments sizes;
  // Machine, checkpoints, calibration.
  int devices = 0;
  std::string peak_flops;
  double utilization = 0.4;
  double eval_utilization = 0;
  std::string ckpt_bandwidth = "1e9";
  double mtbf_hours = 0;
  std::string calibrate;
  std::string compress;
  bool json = false;
  // Memory.
  std::string device_memory;
  std::string host_base;
};
PlanOptions g_plan;
// What the memory plan needs beyond PlanInputs, filled with them.
plan::MemoryInputs g_memory;
// parallel.pp > 1 in the config: the schedule whose bubble the plan predicts (docs/PIPELINE.md).
struct PipelinePlan {
  plan::PipelineShape shape;
  std::vector<int> stage_blocks;  // gpt only
  bool on() const { return shape.pp > 1; }
};
PipelinePlan g_pipeline;

// The optimizer state a checkpoint of this config holds (compute_plan.hpp names).
std::string config_optimizer(const train::OptimizerConfig& optim) {
  switch (optim.kind) {
    case train::OptimizerKind::kSgd: return optim.momentum > 0 ? "sgd-momentum" : "sgd";
    case train::OptimizerKind::kAdamW: return "adamw";
    case train::OptimizerKind::kAdam: break;
  }
  return "adam";
}

// What a finished run did, when the plan recomputes that run instead of a new one: its step count
// and evaluated samples come from its ledger, so no data file has to be found again.
struct RecordedRun {
  std::int64_t steps = 0;
  std::int64_t samples_evaluated = 0;
};

// The model, work and optimizer of a run configuration, for `devices` ranks.
PlanInputs inputs_from_config(Config& config, const PlanOptions& o, int devices,
                              const std::optional<RecordedRun>& recorded) {
  const train::TrainConfig tc = train::TrainConfig::from(config, "runs/plan");
  const int tp = tc.parallel.tp;
  const int pp = tc.parallel.pp;
  if (devices % tp != 0) {
    throw ConfigError(str("--devices ", devices, " is not divisible by parallel.tp = ", tp,
                          ": plan for a multiple of ", tp, " devices"));
  }
  if (devices % (tp * pp) != 0) {
    throw ConfigError(str("--devices ", devices,
                          " is not divisible by parallel.pp x parallel.tp = ", pp * tp,
                          ": plan for a multiple of ", pp * tp, " devices"));
  }
  if (pp > 1) {
    g_pipeline.shape.pp = pp;
    g_pipeline.shape.virtual_stages = tc.parallel.pp_virtual;
    g_pipeline.shape.micro_batches = static_cast<int>(tc.optim.grad_accumulation);
    g_pipeline.shape.kind = tc.parallel.pp_schedule;
    plan::validate_pipeline_shape(g_pipeline.shape);
  }
  PlanInputs in;
  in.source = str("config ", config.origin());
  auto model_section = config.section("model");
  in.model_name = model_section.get<std::string>("name", "mlp");
  std::int64_t seq_len = 0;  // of language-model data windows
  if (in.model_name == "gpt") {
    // Counted analytically so that a config of any size plans without allocating its weights
    // (tests/unit/plan checks the count against the built model).
    const model::GptOptions g = model::read_gpt_options(model_section, tp);
    if (pp > 1) {
      g_pipeline.stage_blocks = plan::pipeline_stage_blocks(
          static_cast<int>(g.layers), g_pipeline.shape.stages(), tc.parallel.pp_layers);
    }
    const plan::TransformerShape shape{g.layers,     g.width,     g.seq_len,
                                       g.vocab_size, g.mlp_ratio, g.tied_embeddings};
    g_memory.gpt = true;
    g_memory.shape = shape;
    g_memory.heads = g.heads;
    g_memory.dropout = g.dropout > 0;
    g_memory.recompute = g.recompute == model::Recompute::kBlock ? plan::RecomputeMode::kBlock
                         : g.recompute == model::Recompute::kAttention
                             ? plan::RecomputeMode::kAttention
                             : plan::RecomputeMode::kNone;
    in.task = "language_model";
    in.non_embedding_parameters = plan::transformer_non_embedding_parameters(shape);
    in.parameters = in.non_embedding_parameters + plan::transformer_embedding_parameters(shape);
    in.tokens_per_sample = static_cast<double>(g.seq_len);
    seq_len = g.seq_len;
    in.forward_flops_per_sample =
        in.tokens_per_sample * plan::transformer_forward_flops_per_token(
                                   in.non_embedding_parameters, g.layers, g.seq_len, g.width);
    in.flops_formula =
        "per sequence 2 N T + 2 layers T^2 width forward (N non-embedding), training 3x: 6 N D "
        "plus attention";
  } else {
    if (pp > 1) {
      throw ConfigError(str("model.name = ", in.model_name,
                            " cannot be cut into pipeline stages (parallel.pp = ", pp,
                            "): only the gpt can; set parallel.pp: 1"));
    }
    // Small models are built on the CPU, unsharded, and their layers counted.
    model::ModelContext ctx;
    auto model = model::build_model(model_section, ctx);
    in.task = model->task();
    in.parameters = static_cast<double>(model->logical_parameter_count());
    if (model->flops_source() != "counted from the layers" &&
        model->forward_flops_per_sample() == 0 && !tc.data.train.empty()) {
      // A user model's FLOPs are counted by running it on one training sample.
      data::DatasetExpectation expect;
      expect.seq_len = model_section.get<std::int64_t>("seq_len", 0);
      auto dataset = data::Dataset::open(tc.data.train, expect, tc.data.read_options());
      data::Batch one = dataset->read({0});
      const auto& info = dataset->info();
      model->check_batch(
          one.inputs, one.targets,
          info.kind == data::DatasetKind::kLanguageModel ? info.vocab_size : info.num_classes,
          "data.train");
    }
    in.forward_flops_per_sample = model->forward_flops_per_sample();
    in.flops_formula = model->flops_source() == "counted from the layers"
                           ? "forward FLOPs counted from the layers, training 3x forward"
                           : str("forward FLOPs: ", model->flops_source(), ", training 3x forward");
    // The trainer reads model.seq_len for every model, so the resolved config.yaml of any run
    // records it: read it too, or planning from that file would call it an unknown key.
    seq_len = model_section.get<std::int64_t>("seq_len", 0);
  }
  config.check_unknown_keys();

  const std::int64_t dp = devices / (tp * pp);
  in.devices = devices;
  g_memory.dp = static_cast<int>(dp);
  g_memory.tp = tp;
  g_memory.shard = tc.parallel.shard_optimizer || o.sizes.shard_optimizer;
  g_memory.bf16 = tc.run.precision == train::Precision::kBf16;
  // With pipeline stages each device holds about 1/pp of the layers.
  g_memory.parameters_per_device = in.parameters / (tp * pp);
  g_memory.micro_batch = tc.data.batch_size;
  in.global_batch = tc.data.batch_size * dp * tc.optim.grad_accumulation;
  in.epochs = o.sizes.epochs > 0 ? o.sizes.epochs : static_cast<double>(tc.run.epochs);
  in.optimizer = o.sizes.optimizer.empty() ? config_optimizer(tc.optim) : o.sizes.optimizer;

  if (recorded) {
    in.steps = recorded->steps;
    in.train_samples = static_cast<double>(in.steps * in.global_batch);
    const bool evaluates = !tc.data.val.empty();
    in.eval_passes = evaluates ? static_cast<double>(plan::planned_evaluations(
                                     in.steps, tc.eval.every_steps, tc.eval.at_end))
                               : 0;
    if (in.eval_passes > 0) {
      in.eval_samples_per_pass = static_cast<double>(recorded->samples_evaluated) / in.eval_passes;
    }
    return in;
  }

  if (o.sizes.samples > 0) {
    in.samples_per_epoch = o.sizes.samples;
  } else if (o.sizes.tokens > 0) {
    in.samples_per_epoch = std::floor(o.sizes.tokens / in.tokens_per_sample);
  } else {
    if (tc.data.train.empty()) {
      throw ConfigError(
          "data.train is not set: give the training file in the config, or the size of an "
          "epoch with --samples N (or --tokens N)");
    }
    if (!std::filesystem::exists(tc.data.train)) {
      throw DataError(str("data.train = ", tc.data.train,
                          ": no such file (relative paths are taken from the current "
                          "directory); prepare it, or give the epoch size with --samples N"));
    }
    data::DatasetExpectation expect;
    expect.seq_len = seq_len;
    expect.config_key = "data.train";
    in.samples_per_epoch = static_cast<double>(
        data::Dataset::open(tc.data.train, expect, tc.data.read_options())->info().num_samples);
  }
  if (in.epochs != std::floor(in.epochs)) {
    throw ConfigError(str("--epochs ", in.epochs, ": the trainer runs whole epochs"));
  }
  // The trainer runs whole steps of one global batch; an epoch drops the remainder.
  in.steps = plan::planned_steps(static_cast<std::int64_t>(in.samples_per_epoch), in.global_batch,
                                 static_cast<std::int64_t>(in.epochs), tc.run.max_steps);
  if (in.steps < 1) {
    throw ConfigError(str("an epoch of ", in.samples_per_epoch,
                          " samples does not fill one step of ", in.global_batch,
                          " samples (data.batch_size ", tc.data.batch_size, " x ", dp,
                          " data-parallel ranks x ", tc.optim.grad_accumulation,
                          " micro-batches): nothing would be trained"));
  }
  in.train_samples = static_cast<double>(in.steps * in.global_batch);

  if (o.sizes.eval_samples > 0) {
    in.eval_samples_per_pass = o.sizes.eval_samples;
  } else if (o.sizes.eval_tokens > 0) {
    in.eval_samples_per_pass = std::floor(o.sizes.eval_tokens / in.tokens_per_sample);
  } else if (!tc.data.val.empty()) {
    if (!std::filesystem::exists(tc.data.val)) {
      throw DataError(str("data.val = ", tc.data.val,
                          ": no such file; prepare it, or give the size of an evaluation with "
                          "--eval-samples N"));
    }
    data::DatasetExpectation expect;
    expect.seq_len = seq_len;
    expect.config_key = "data.val";
    in.eval_samples_per_pass = static_cast<double>(
        data::Dataset::open(tc.data.val, expect, tc.data.read_options())->info().num_samples);
  }
  if (tc.eval.max_samples > 0) {
    in.eval_samples_per_pass =
        std::min(in.eval_samples_per_pass, static_cast<double>(tc.eval.max_samples));
  }
  if (o.sizes.evals >= 0) {
    in.eval_passes = o.sizes.evals;
  } else if (in.eval_samples_per_pass > 0) {
    in.eval_passes = static_cast<double>(
        plan::planned_evaluations(in.steps, tc.eval.every_steps, tc.eval.at_end));
  }
  return in;
}

LedgerCalibration load_calibration(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / "ledger.json").string();
  runtime::require_regular_file_if_present(
      path, runtime::FileKind::kConfig, str("--calibrate ", run_dir, ":"),
      "give the run directory of a finished hpctrain train run");
  std::ifstream file(path);
  if (!file) {
    throw ConfigError(str("--calibrate ", run_dir, ": cannot read ", path,
                          "; give the run directory of a finished hpctrain train run"));
  }
  nlohmann::json ledger;
  try {
    file >> ledger;
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str(path, ": not valid JSON (", e.what(), ")"));
  }
  return plan::read_ledger_calibration(ledger, path);
}

// How well the plan reproduces the calibrating run itself: its FLOPs from its recorded config,
// the estimate before calibration (assumed utilisation) and after, against its ledger.
nlohmann::ordered_json check_against_calibrating_run(const PlanOptions& o,
                                                     const LedgerCalibration& cal,
                                                     double peak_flops) {
  nlohmann::ordered_json check;
  const auto config_path = std::filesystem::path(o.calibrate) / "config.yaml";
  if (!std::filesystem::exists(config_path)) {
    check["skipped"] = str(config_path.string(), " not found");
    return check;
  }
  Config config = Config::load(config_path.string());
  PlanOptions defaults;
  defaults.sizes.optimizer = o.sizes.optimizer;
  PlanInputs in = inputs_from_config(config, defaults, cal.world_size,
                                     RecordedRun{cal.steps, cal.samples_evaluated});
  in.peak_flops_per_device = peak_flops;
  in.utilization = o.utilization;
  in.eval_utilization = o.eval_utilization;
  check["config"] = config_path.string();
  check["train_samples"] = {{"planned", in.train_samples}, {"ledger", cal.samples_trained}};
  const ComputePlan assumed = plan::make_plan(in);
  check["train_flops"] = {{"planned", assumed.train_flops},
                          {"ledger", cal.train_flops},
                          {"error", plan::relative_error(assumed.train_flops, cal.train_flops)}};
  if (peak_flops > 0) {
    // The estimate a user would have had before the run: the assumed utilisation.
    const double predicted = assumed.train_wall_s;
    check["assumed_utilization_train_wall_s"] = {
        {"predicted", predicted},
        {"actual", cal.train_wall_s},
        {"error", plan::relative_error(predicted, cal.train_wall_s)}};
  }
  in.calibration = cal;
  const ComputePlan calibrated = plan::make_plan(in);
  const double error = plan::relative_error(calibrated.total_wall_s, cal.total_wall_s);
  check["calibrated_total_wall_s"] = {
      {"predicted", calibrated.total_wall_s}, {"actual", cal.total_wall_s}, {"error", error}};
  return check;
}

// ---- Output --------------------------------------------------------------------------------

void add_plan_rows(Table& t, const ComputePlan& p) {
  const PlanInputs& in = p.in;
  t.section(str("model: ", in.model_name, " (", in.source, ")"));
  t.row("parameters", in.parameters, "");
  if (in.non_embedding_parameters > 0) {
    t.row("non-embedding parameters", in.non_embedding_parameters, "");
  }
  t.row("forward FLOPs per sample", in.forward_flops_per_sample, "FLOP");
  if (in.tokens_per_sample > 1) t.row("tokens per sample", in.tokens_per_sample, "");
  t.text("FLOP formula", in.flops_formula);

  t.section("work");
  if (in.samples_per_epoch > 0) t.row("samples per epoch", in.samples_per_epoch, "");
  t.row("epochs", in.epochs, "");
  if (in.global_batch > 0) t.row("global batch", static_cast<double>(in.global_batch), "samples");
  if (in.steps > 0) t.row("steps", static_cast<double>(in.steps), "");
  t.row("training samples", in.train_samples, "");
  if (in.tokens_per_sample > 1 || in.task == "language_model") {
    t.row("training tokens (D)", p.train_tokens, "");
  }
  t.row("evaluation samples per pass", in.eval_samples_per_pass, "");
  t.row("evaluation passes", in.eval_passes, "");

  t.section("FLOPs");
  t.row("training", p.train_flops, "FLOP");
  t.row("evaluation per pass", p.eval_flops_per_pass, "FLOP");
  t.row("evaluation, all passes", p.eval_flops, "FLOP");

  t.section(str("devices (", p.rate_source, ")"));
  t.row("devices", in.devices, "");
  if (in.peak_flops_per_device > 0) t.row("peak per device", in.peak_flops_per_device, "FLOP/s");
  if (p.utilization > 0) {
    t.row(p.rate_source == "calibrated" ? "utilization (measured)" : "utilization (assumed)",
          p.utilization * 100, "% of peak");
  }
  if (p.eval_utilization > 0)
    t.row("evaluation utilization", p.eval_utilization * 100, "% of peak");
  if (p.timed) {
    t.row("training rate per device", p.train_flops_per_s_per_device, "FLOP/s");
    t.row("evaluation rate per device", p.eval_flops_per_s_per_device, "FLOP/s");
  }

  t.section("time");
  if (p.timed) {
    t.row("training wall time", p.train_wall_s, "s", human_seconds(p.train_wall_s));
    t.row("evaluation wall time per pass", p.eval_wall_per_pass_s, "s",
          human_seconds(p.eval_wall_per_pass_s));
    t.row("evaluation wall time, all passes", p.eval_wall_s, "s", human_seconds(p.eval_wall_s));
    if (p.overhead_s > 0) t.row("setup and other overhead", p.overhead_s, "s");
    t.row("total wall time", p.total_wall_s, "s", human_seconds(p.total_wall_s));
    if (p.step_s > 0) t.row("time per step", p.step_s, "s");
    t.row("training device-hours", p.train_device_hours, "device-h");
    t.row("evaluation device-hours", p.eval_device_hours, "device-h");
    t.row("total device-hours", p.total_device_hours, "device-h");
  } else {
    t.text("wall time", "unknown: give --peak-flops or --calibrate");
  }

  t.section(str("checkpoints (", in.optimizer, ")"));
  t.row("bytes per parameter", p.bytes_per_parameter, "B", "(fp32 weights + optimizer state)");
  t.row("checkpoint size", p.checkpoint_bytes, "B",
        str("(", format_bytes(p.checkpoint_bytes), ")"));
  t.row("write bandwidth", in.checkpoint_bandwidth, "B/s");
  t.row("write time", p.checkpoint_write_s, "s", human_seconds(p.checkpoint_write_s));
  if (p.interval) {
    t.row("MTBF", in.mtbf_s / 3600, "h");
    t.row("Young/Daly interval", p.interval->interval_s, "s",
          human_seconds(p.interval->interval_s));
    if (p.interval_steps > 0) t.row("interval in steps", std::round(p.interval_steps), "steps");
    t.row("time spent saving", p.interval->save_fraction * 100, "%");
    t.row("work redone after failures", p.interval->rework_fraction * 100, "%");
    t.row("lost work, total", p.interval->waste_fraction * 100, "%");
    if (p.timed) t.row("expected failures in the run", p.expected_failures, "");
  } else {
    t.text("Young/Daly interval", "give --mtbf HOURS");
  }
}

// The measured int8 / float32 evaluation speed of the calibrating run: its newest result of
// `hpctrain eval --quantize int8` (or of an int8 compressed checkpoint evaluated into
// RUN_DIR/eval) that has the float32 evaluation beside it.
nlohmann::json measured_int8_speedup(const std::string& run_dir) {
  const std::string path = run_dir + "/eval/results.jsonl";
  if (runtime::path_type(path) != runtime::PathType::kRegular) return nullptr;  // FIFO: would block
  std::ifstream in(path);
  nlohmann::json found;
  std::string line;
  while (std::getline(in, line)) {
    const auto r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.contains("compression")) continue;
    const auto& c = r["compression"];
    if (c.value("quantize", nlohmann::json()) != "int8" || c.value("prune", 0.0) > 0) continue;
    if (!c.contains("float32") || c["float32"].value("speedup", 0.0) <= 0) continue;
    found = {{"speedup", c["float32"]["speedup"]},
             {"step", r.value("step", std::int64_t{0})},
             {"accuracy_drop", c["float32"]["drop"].value("accuracy", 0.0)},
             {"loss_drop", c["float32"]["drop"].value("loss", 0.0)},
             {"batch_size", r.value("batch_size", std::int64_t{0})},
             {"world_size", r.value("world_size", 0)},
             {"source", path}};
  }
  if (found.is_null()) {
    throw ConfigError(
        str("--compress int8 estimates from the int8/float32 speed measured on the "
            "--calibrate run, and ",
            path,
            " has no int8 result with its float32 evaluation: run `hpctrain eval "
            "--checkpoint ",
            run_dir, " --quantize int8` first"));
  }
  return found;
}

// The memory plan's rows (docs/PLAN.md, "Memory").
void add_memory_rows(Table& t, const plan::MemoryPlan& p) {
  const plan::MemoryInputs& m = p.in;
  t.section(str("memory per device (", p.optimizer, ", dp=", m.dp, " x tp=", m.tp, ", optimizer ",
                "state ", m.shard ? "sharded" : "not sharded", ")"));
  t.row("bytes per parameter", p.run.total(), "B",
        str("(weights ", number_text(p.run.weights), " + gradients ", number_text(p.run.gradients),
            " + optimizer state ", number_text(p.run.sharded), ")"));
  t.row(m.shard ? "bytes per parameter, unsharded" : "bytes per parameter, sharded",
        p.other.total(), "B");
  t.row("bf16 weights + fp32 master (Megatron)", p.mixed.total(), "B",
        m.shard ? "(6 + 12/dp for Adam)" : "(18 for Adam)");
  t.row("parameters on this device", m.parameters_per_device, "", m.tp > 1 ? "(logical / tp)" : "");
  t.row("weights + gradients + optimizer state", p.state_bytes, "B",
        str("(", format_bytes(p.state_bytes), ")"));
  if (m.gpt) {
    for (auto mode : {plan::RecomputeMode::kNone, plan::RecomputeMode::kAttention,
                      plan::RecomputeMode::kBlock}) {
      const double bytes = p.activations[static_cast<int>(mode)].total();
      t.row(str("activations per micro-batch, recompute ", plan::recompute_name(mode)), bytes, "B",
            str("(", format_bytes(bytes), mode == m.recompute ? "; this run)" : ")"));
    }
  } else {
    t.text("activations",
           "estimated for the gpt only (a config, or --layers --width --seq-len "
           "--vocab --heads --micro-batch)");
  }
  t.row("total (state + this run's activations)", p.total_bytes, "B",
        str("(", format_bytes(p.total_bytes), ")"));
  t.row("peak resident memory on a CPU host", p.host.peak_rss(), "B",
        str("(", format_bytes(p.host.peak_rss()), ": + heap slack ",
            format_bytes(p.host.heap_slack), " + process base ", format_bytes(p.host.process_base),
            "; a typical rank: leave ~15% for the heap's scatter, docs/MEMORY.md)"));
  if (p.device_memory > 0) {
    t.row("device memory", p.device_memory, "B", str("(", format_bytes(p.device_memory), ")"));
    t.text("fits",
           p.fits()
               ? str("yes, ", number_text(std::round(p.total_bytes / p.device_memory * 1000) / 10),
                     "% of the device")
               : str("no: ", format_bytes(p.total_bytes), " > ", format_bytes(p.device_memory),
                     "; shard the optimizer state (parallel.shard_optimizer), "
                     "recompute activations (model.recompute), or use a smaller "
                     "data.batch_size or more tp"));
  }
}

int run_plan(CommandContext& ctx) {
  const PlanOptions& o = g_plan;
  std::optional<LedgerCalibration> calibration;
  if (!o.calibrate.empty()) calibration = load_calibration(o.calibrate);
  const int devices = o.devices > 0 ? o.devices : (calibration ? calibration->world_size : 1);
  const double peak =
      o.peak_flops.empty() ? 0 : plan::parse_peak_flops(o.peak_flops, "--peak-flops");
  if (!o.sizes.optimizer.empty())
    plan::optimizer_state_bytes_per_parameter(o.sizes.optimizer);  // validates
  const double bandwidth = static_cast<double>(parse_bytes(o.ckpt_bandwidth, "--ckpt-bandwidth"));
  const double device_memory =
      o.device_memory.empty() ? 0 : plan::parse_bytes(o.device_memory, "--device-memory");
  const double host_base = o.host_base.empty() ? 0 : plan::parse_bytes(o.host_base, "--host-base");

  PlanInputs in;
  if (!o.config.empty() || (!plan::has_model_size(o.sizes) && calibration)) {
    if (!o.config.empty() && plan::has_model_size(o.sizes)) {
      throw ConfigError(
          "give either --config or size arguments (--params, --layers, --width, "
          "--forward-flops), not both; size the config's work with --samples/--tokens/--epochs");
    }
    // Without a config, plan the calibrating run's own configuration.
    const std::string path =
        o.config.empty() ? (std::filesystem::path(o.calibrate) / "config.yaml").string() : o.config;
    Config config = Config::load(path);
    for (const auto& assignment : o.overrides) config.set(assignment);
    in = inputs_from_config(config, o, devices, std::nullopt);
  } else {
    if (!o.overrides.empty()) throw ConfigError("--set needs --config");
    in = plan::inputs_from_sizes(o.sizes, devices, g_memory);
  }
  in.peak_flops_per_device = peak;
  in.utilization = o.utilization;
  in.eval_utilization = o.eval_utilization;
  in.checkpoint_bandwidth = bandwidth;
  in.mtbf_s = o.mtbf_hours * 3600;
  in.calibration = calibration;
  const ComputePlan plan = plan::make_plan(in);

  nlohmann::ordered_json j = plan::plan_to_json(plan);
  nlohmann::json int8;
  if (!o.compress.empty()) {
    if (o.compress != "int8") {
      throw ConfigError(str("--compress ", o.compress, ": the evaluation side plans int8 only"));
    }
    if (!calibration) {
      throw ConfigError(
          "--compress int8 needs --calibrate RUN_DIR: the int8/float32 speed ratio is measured, "
          "not assumed (hpctrain eval --quantize int8 on one of that run's checkpoints)");
    }
    if (!plan.timed || !(plan.eval_wall_per_pass_s > 0) || !std::isfinite(plan.eval_wall_s)) {
      throw ConfigError(
          str("--compress int8 scales the float32 evaluation time, and there is "
              "none: the --calibrate run (",
              o.calibrate,
              ") must have evaluated (eval.every_steps), and the plan must "
              "evaluate (--eval-samples N)"));
    }
    int8 = measured_int8_speedup(o.calibrate);
    const plan::Int8Evaluation e = plan::int8_evaluation(plan, int8["speedup"].get<double>());
    int8["eval_wall_per_pass_s"] = e.eval_wall_per_pass_s;
    int8["eval_wall_s"] = e.eval_wall_s;
    int8["eval_device_hours"] = e.eval_device_hours;
    j["compress_int8"] = int8;
  }
  const plan::MemoryPlan memory =
      plan::make_memory_plan(g_memory, in.optimizer, device_memory, host_base);
  j["memory"] = plan::memory_plan_to_json(memory);
  // The pipeline's bubble: the share of each step a stage waits for its neighbours, from the
  // schedule's arithmetic (the plan library's simulation shows it exact for equal stages); the
  // training time above assumes none, so it is divided by (1 - bubble) here.
  double bubble = 0;
  if (g_pipeline.on()) {
    bubble = plan::predicted_bubble_fraction(g_pipeline.shape);
    nlohmann::ordered_json pl{{"pp", g_pipeline.shape.pp},
                              {"schedule", plan::pipeline_schedule_name(g_pipeline.shape.kind)},
                              {"virtual_stages", g_pipeline.shape.virtual_stages},
                              {"micro_batches", g_pipeline.shape.micro_batches},
                              {"predicted_bubble_fraction", bubble}};
    if (!g_pipeline.stage_blocks.empty()) pl["stage_blocks"] = g_pipeline.stage_blocks;
    if (plan.timed) pl["train_wall_with_bubble_s"] = plan.train_wall_s / (1 - bubble);
    j["pipeline"] = pl;
  }
  nlohmann::ordered_json check;
  if (calibration) {
    const LedgerCalibration& c = *calibration;
    check = check_against_calibrating_run(o, c, peak);
    nlohmann::ordered_json cal{{"run_dir", o.calibrate}};
    cal.update(plan::calibration_to_json(c, peak));
    cal["check"] = check;
    j["calibration"] = cal;
  }

  if (ctx.runtime.world_rank() != 0) return 0;
  if (o.json) {
    print_json(j);
    return 0;
  }
  Table t;
  add_plan_rows(t, plan);
  add_memory_rows(t, memory);
  if (g_pipeline.on()) {
    const auto& shape = g_pipeline.shape;
    t.section(str("pipeline (pp=", shape.pp, " ", plan::pipeline_schedule_name(shape.kind),
                  shape.virtual_stages > 1 ? str(" V=", shape.virtual_stages) : std::string(), ", ",
                  shape.micro_batches, " micro-batches)"));
    t.row("bubble: (pp-1)/(V m+pp-1)", bubble * 100, "% of a step");
    if (plan.timed) {
      t.row("training wall time with the bubble", plan.train_wall_s / (1 - bubble), "s",
            human_seconds(plan.train_wall_s / (1 - bubble)));
    }
  }
  if (calibration) {
    const LedgerCalibration& c = *calibration;
    t.section(str("calibration: ", o.calibrate, " (", c.model_name, ", ", c.world_size, " ranks x ",
                  c.threads_per_rank, " threads, ", c.device, ", ", c.steps, " steps)"));
    t.row("measured training rate per device", c.train_flops_per_s_per_device, "FLOP/s");
    if (c.eval_flops_per_s_per_device > 0) {
      t.row("measured evaluation rate per device", c.eval_flops_per_s_per_device, "FLOP/s");
      t.row("train:eval cost per sample", c.cost_ratio_train_to_eval, "", "(FLOPs say 3)");
    }
    t.row("measured setup and other overhead", c.overhead_s, "s");
    if (check.contains("train_flops")) {
      t.row("that run's train FLOPs, plan vs ledger",
            check["train_flops"]["error"].get<double>() * 100, "% error");
      if (check.contains("assumed_utilization_train_wall_s")) {
        const auto& a = check["assumed_utilization_train_wall_s"];
        t.row("its training time at the assumed utilization", a["predicted"].get<double>(), "s",
              str("(actual ", number_text(a["actual"].get<double>()), " s, error ",
                  percent_text(a["error"].get<double>()), ")"));
      }
      const auto& cw = check["calibrated_total_wall_s"];
      t.row("its total time, calibrated", cw["predicted"].get<double>(), "s",
            str("(actual ", number_text(cw["actual"].get<double>()), " s, error ",
                percent_text(cw["error"].get<double>()), ")"));
    } else if (check.contains("skipped")) {
      t.text("check against that run", str("skipped: ", check["skipped"].get<std::string>()));
    }
  }
  if (!int8.is_null()) {
    t.section(str("evaluation in int8 (measured x", number_text(int8["speedup"].get<double>()),
                  " samples/s of float32 at step ", int8["step"].get<std::int64_t>(), ", ",
                  int8["source"].get<std::string>(), ")"));
    t.row("int8 evaluation wall time per pass", int8["eval_wall_per_pass_s"].get<double>(), "s",
          human_seconds(int8["eval_wall_per_pass_s"].get<double>()));
    t.row("int8 evaluation wall time, all passes", int8["eval_wall_s"].get<double>(), "s",
          human_seconds(int8["eval_wall_s"].get<double>()));
    t.row("int8 evaluation device-hours", int8["eval_device_hours"].get<double>(), "device-h");
    t.row("accuracy drop measured", int8["accuracy_drop"].get<double>(), "");
  }
  std::cout << "hpctrain plan\n";
  t.print(std::cout);
  for (const auto& note : plan.notes) std::cout << "note: " << note << "\n";
  std::cout << std::flush;
  return 0;
}

CommandRegistration reg(
    "plan",
    "Estimate a run before it starts: FLOPs, wall time, device-hours, checkpoint size and "
    "interval (docs/PLAN.md)",
    [](CLI::App& app) {
      PlanOptions& o = g_plan;
      app.add_option("-c,--config", o.config, "Run configuration (YAML) to plan")
          ->check(CLI::ExistingFile);
      app.add_option("--set", o.overrides,
                     "Override a config key: --set run.max_steps=600 (repeatable)");
      auto* sizes = "Size arguments (instead of --config)";
      app.add_option("--params", o.sizes.params,
                     "Transformer parameters N (training 6 N D), or any model's parameters for "
                     "the checkpoint size")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--layers", o.sizes.layers, "Transformer layers")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--width", o.sizes.width, "Transformer width (d_model)")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--seq-len", o.sizes.seq_len, "Sequence length T (adds attention FLOPs)")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--vocab", o.sizes.vocab, "Vocabulary (embedding parameters)")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--mlp-ratio", o.sizes.mlp_ratio, "MLP width / width (default 4)")
          ->group(sizes)
          ->check(CLI::PositiveNumber);
      app.add_option("--forward-flops", o.sizes.forward_flops,
                     "Forward FLOPs per sample of another model")
          ->group(sizes)
          ->check(CLI::NonNegativeNumber);
      auto* work = "Work (overrides the config's)";
      app.add_option("--tokens", o.sizes.tokens, "Training tokens D per epoch")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--samples", o.sizes.samples, "Training samples per epoch")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--epochs", o.sizes.epochs, "Epochs (default: run.epochs, else 1)")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--eval-tokens", o.sizes.eval_tokens, "Tokens per evaluation pass")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--eval-samples", o.sizes.eval_samples, "Samples per evaluation pass")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--compress", o.compress,
                     "int8: also estimate the evaluation in int8, from the int8/float32 speed "
                     "measured on the --calibrate run (hpctrain eval --quantize int8)");
      app.add_option("--evals", o.sizes.evals,
                     "Evaluation passes in the run (default: from eval.every_steps and "
                     "eval.at_end, else 1 when an evaluation size is given)")
          ->group(work)
          ->check(CLI::NonNegativeNumber);
      auto* machine = "Machine";
      app.add_option("--devices", o.devices,
                     "Devices (ranks) (default: the calibrating run's, else 1)")
          ->group(machine)
          ->check(CLI::PositiveNumber);
      app.add_option("--peak-flops", o.peak_flops,
                     "Peak FLOP/s per device, a number (989e12) or a preset: h200-sxm-bf16, "
                     "h100-sxm-bf16, a100-sxm-bf16, and -fp32 variants")
          ->group(machine);
      app.add_option("--utilization", o.utilization,
                     "Model FLOPs utilisation assumed for training (default 0.4)")
          ->group(machine);
      app.add_option("--eval-utilization", o.eval_utilization,
                     "Utilisation assumed for evaluation (default: --utilization)")
          ->group(machine);
      auto* ckpt = "Checkpoints";
      app.add_option("--optimizer", o.sizes.optimizer,
                     "sgd | sgd-momentum | adam | adamw: optimizer state in a checkpoint "
                     "(default: the config's, else adam)")
          ->group(ckpt);
      app.add_option("--ckpt-bandwidth", o.ckpt_bandwidth,
                     "Checkpoint write bandwidth in bytes/s (2e9, or 2G = 2 GiB/s; default 1e9)")
          ->group(ckpt);
      app.add_option("--mtbf", o.mtbf_hours,
                     "Mean time between failures of the whole job, hours (Young/Daly interval)")
          ->group(ckpt)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--calibrate", o.calibrate,
                     "Finished run directory: use its ledger.json's measured rates, eval cost and "
                     "overhead, and report the estimate's error on that run")
          ->check(CLI::ExistingDirectory);
      auto* memory = "Memory";
      app.add_option("--device-memory", o.device_memory,
                     "Memory of one device (80GiB, 141GB): say whether the run fits")
          ->group(memory);
      app.add_option("--host-base", o.host_base,
                     "Resident memory of a training process before its model (e.g. 203MiB, the "
                     "default): the CPU host's peak resident memory adds it")
          ->group(memory);
      app.add_flag("--shard-optimizer", o.sizes.shard_optimizer,
                   "Plan with the optimizer state sharded over the data-parallel group "
                   "(parallel.shard_optimizer)")
          ->group(memory);
      app.add_option("--heads", o.sizes.heads,
                     "Attention heads (activation estimate, size arguments)")
          ->group(memory)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--micro-batch", o.sizes.micro_batch,
                     "Sequences per micro-batch (activation estimate, size arguments)")
          ->group(memory)
          ->check(CLI::NonNegativeNumber);
      app.add_flag("--json", o.json, "Print JSON with every number instead of a table");
    },
    run_plan, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
