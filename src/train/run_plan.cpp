#include "hpctrain/train/run_plan.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/model_family.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain::train {
namespace {

using plan::ComputePlan;
using plan::LedgerCalibration;
using plan::MemoryInputs;
using plan::PlanInputs;

// The plan library's shard modes are parallel's, value for value.
static_assert(static_cast<int>(plan::ShardMode::kFull) ==
                  static_cast<int>(parallel::ShardMode::kFull) &&
              static_cast<int>(plan::ShardMode::kGradients) ==
                  static_cast<int>(parallel::ShardMode::kGradients) &&
              static_cast<int>(plan::ShardMode::kOptimizer) ==
                  static_cast<int>(parallel::ShardMode::kOptimizer));

// The optimizer state a checkpoint of this config holds (compute_plan.hpp names).
std::string config_optimizer(const OptimizerConfig& optim) {
  switch (optim.kind) {
    case OptimizerKind::kSgd: return optim.momentum > 0 ? "sgd-momentum" : "sgd";
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdam: break;
  }
  return "adam";
}

// What a finished run did, when the plan recomputes that run instead of a new one: its step count
// and evaluated samples come from its ledger, so no data file has to be found again.
struct RecordedRun {
  std::int64_t steps = 0;
  std::int64_t samples_evaluated = 0;
};

// --devices must hold whole tp x pp groups.
void check_devices(int devices, int tp, int pp) {
  if (devices % tp != 0) {
    throw ConfigError(str("--devices ", devices, " is not divisible by parallel.tp = ", tp,
                          ": plan for a multiple of ", tp, " devices"));
  }
  if (devices % (tp * pp) != 0) {
    throw ConfigError(str("--devices ", devices,
                          " is not divisible by parallel.pp x parallel.tp = ", pp * tp,
                          ": plan for a multiple of ", pp * tp, " devices"));
  }
}

// A decoder family's parameters, FLOPs and activation shape (its DecoderFacts), counted
// analytically so that a config of any size plans without allocating its weights
// (tests/unit/plan checks the count against the built model); its blocks per pipeline stage into
// `pipeline` (parallel.pp > 1).
void count_decoder(ConfigSection& model_section, const TrainConfig& tc, PlanInputs& in,
                   MemoryInputs& memory, PipelinePlan& pipeline) {
  const model::DecoderFacts f =
      model::find_model_family(in.model_name)->decoder_facts(model_section, tc.parallel.tp);
  if (tc.parallel.pp > 1) {
    pipeline.stage_blocks = plan::pipeline_stage_blocks(
        static_cast<int>(f.shape.layers), pipeline.shape.stages(), tc.parallel.pp_layers);
  }
  memory.decoder = true;
  memory.shape = f.shape;
  memory.heads = f.heads;
  memory.dropout = f.dropout;
  memory.recompute = f.recompute == model::Recompute::kBlock       ? plan::RecomputeMode::kBlock
                     : f.recompute == model::Recompute::kAttention ? plan::RecomputeMode::kAttention
                                                                   : plan::RecomputeMode::kNone;
  in.task = Task::kLanguageModel;
  in.non_embedding_parameters = plan::transformer_non_embedding_parameters(f.shape);
  in.parameters = in.non_embedding_parameters + plan::transformer_embedding_parameters(f.shape);
  in.tokens_per_sample = static_cast<double>(f.shape.seq_len);
  in.forward_flops_per_sample =
      in.tokens_per_sample * plan::transformer_forward_flops_per_token(f.shape);
  in.flops_formula =
      f.shape.swiglu
          ? "per token 2 (N + V D) + 4 layers T heads head_dim forward (N non-embedding, the "
            "head counted), training 3x: 6 N D plus the head and attention"
          : "per sequence 2 N T + 2 layers T^2 width + 2 width V T (output head) forward (N "
            "non-embedding), training 3x: 6 N D plus attention and head";
}

// Any other model: built on the CPU, unsharded, and its layers counted.
void count_built_model(ConfigSection& model_section, const TrainConfig& tc, PlanInputs& in) {
  if (tc.parallel.pp > 1) {
    throw ConfigError(str("model.name = ", in.model_name,
                          " cannot be cut into pipeline stages (parallel.pp = ", tc.parallel.pp,
                          "): only the gpt and llama can; set parallel.pp: 1"));
  }
  model::ModelContext ctx;
  auto model = model::build_model(model_section, ctx);
  in.task = model->task();
  in.parameters = static_cast<double>(model->logical_parameter_count());
  if (model->flops_source() != "counted from the layers" &&
      model->forward_flops_per_sample() == 0 && !tc.data.train.empty()) {
    // A user model's FLOPs are counted by running it on one training sample.
    data::DatasetExpectation expect;
    expect.seq_len = tc.model.seq_len;
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
}

// The layout, sharding and precision the memory plan needs.
void fill_memory_inputs(const TrainConfig& tc, const PlanRequest& o, std::int64_t dp,
                        double parameters, MemoryInputs& memory) {
  const int tp = tc.parallel.tp;
  const int pp = tc.parallel.pp;
  memory.dp = static_cast<int>(dp);
  memory.tp = tp;
  // parallel.shard as the plan library knows it (plan/ does not depend on parallel/).
  memory.shard = o.sizes.shard_optimizer;
  memory.shard_mode = static_cast<plan::ShardMode>(static_cast<int>(tc.parallel.shard));
  if (tc.parallel.shard_group > 0) {
    memory.shard_ranks = tc.parallel.shard_group;
  } else if (tc.parallel.shard_group < 0) {  // node: the dp ranks of one node
    memory.shard_ranks =
        static_cast<int>(std::min<std::int64_t>(dp, std::max(1, o.devices_per_node / (tp * pp))));
  }
  memory.reshard_after_forward = tc.parallel.reshard_after_forward;
  memory.param_dtype_bytes = tc.parallel.param_dtype == parallel::ShardDtype::kBFloat16 ? 2 : 4;
  memory.reduce_dtype_bytes = tc.parallel.reduce_dtype == parallel::ShardDtype::kBFloat16 ? 2 : 4;
  memory.bucket_bytes = static_cast<double>(tc.parallel.bucket_bytes());
  memory.micro_batches = tc.optim.grad_accumulation;
  memory.precision = tc.run.precision;
  // With pipeline stages each device holds about 1/pp of the layers.
  memory.parameters_per_device = parameters / (tp * pp);
  memory.micro_batch = tc.data.batch_size;
}

// The steps of the planned epochs: the epoch's size from --samples, --tokens or data.train.
void size_training(const TrainConfig& tc, const PlanRequest& o, std::int64_t dp, PlanInputs& in) {
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
    data::DatasetExpectation expect;
    expect.seq_len = tc.model.seq_len;
    expect.vocab_size = tc.model.vocab_size;
    expect.config_key = "data.train";
    try {  // a file, a directory, globs, a list or a weighted mixture, as training reads them
      in.samples_per_epoch = static_cast<double>(
          data::Dataset::open(tc.data.train, expect, tc.data.read_options())->info().num_samples);
    } catch (const DataError& e) {
      throw DataError(str(e.what(),
                          " (relative paths are taken from the current directory; "
                          "or give plan the epoch size with --samples N)"));
    }
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
}

// The evaluations: their size from --eval-samples, --eval-tokens or data.val, their count from
// --evals or eval.every_steps.
void size_evaluations(const TrainConfig& tc, const PlanRequest& o, PlanInputs& in) {
  if (o.sizes.eval_samples > 0) {
    in.eval_samples_per_pass = o.sizes.eval_samples;
  } else if (o.sizes.eval_tokens > 0) {
    in.eval_samples_per_pass = std::floor(o.sizes.eval_tokens / in.tokens_per_sample);
  } else if (!tc.data.val.empty()) {
    data::DatasetExpectation expect;
    expect.seq_len = tc.model.seq_len;
    expect.vocab_size = tc.model.vocab_size;
    expect.config_key = "data.val";
    try {
      in.eval_samples_per_pass = static_cast<double>(
          data::Dataset::open(tc.data.val, expect, tc.data.read_options())->info().num_samples);
    } catch (const DataError& e) {
      throw DataError(str(e.what(),
                          " (or give plan the size of an evaluation with "
                          "--eval-samples N)"));
    }
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
}

// The model, work and optimizer of a run configuration, for `devices` ranks; its pipeline
// schedule into `pipeline` (parallel.pp > 1).
PlanInputs inputs_from_config(Config& config, const PlanRequest& o, int devices,
                              const std::optional<RecordedRun>& recorded, MemoryInputs& memory,
                              PipelinePlan& pipeline) {
  const TrainConfig tc = TrainConfig::from(config, "runs/plan");
  const int tp = tc.parallel.tp;
  const int pp = tc.parallel.pp;
  check_devices(devices, tp, pp);
  if (pp > 1) {
    pipeline.shape.pp = pp;
    pipeline.shape.virtual_stages = tc.parallel.pp_virtual;
    pipeline.shape.micro_batches = static_cast<int>(tc.optim.grad_accumulation);
    pipeline.shape.kind = tc.parallel.pp_schedule;
    plan::validate_pipeline_shape(pipeline.shape);
  }
  PlanInputs in;
  in.source = str("config ", config.origin());
  auto model_section = config.section("model");
  in.model_name = tc.model.name;
  const model::ModelFamily* family = model::find_model_family(in.model_name);
  if (family != nullptr && family->decoder) {
    count_decoder(model_section, tc, in, memory, pipeline);
  } else {
    count_built_model(model_section, tc, in);
  }
  config.check_unknown_keys();

  const std::int64_t dp = devices / (tp * pp);
  in.devices = devices;
  fill_memory_inputs(tc, o, dp, in.parameters, memory);
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
  size_training(tc, o, dp, in);
  size_evaluations(tc, o, in);
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
nlohmann::ordered_json check_against_calibrating_run(const PlanRequest& o,
                                                     const LedgerCalibration& cal,
                                                     double peak_flops) {
  nlohmann::ordered_json check;
  const auto config_path = std::filesystem::path(o.calibrate) / "config.yaml";
  if (!std::filesystem::exists(config_path)) {
    check["skipped"] = str(config_path.string(), " not found");
    return check;
  }
  Config config = Config::load(config_path.string());
  PlanRequest defaults;
  defaults.sizes.optimizer = o.sizes.optimizer;
  MemoryInputs memory;    // the check compares compute figures only
  PipelinePlan pipeline;  // and so the bubble's neither
  PlanInputs in =
      inputs_from_config(config, defaults, cal.world_size,
                         RecordedRun{cal.steps, cal.samples_evaluated}, memory, pipeline);
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

}  // namespace

RunPlan make_run_plan(const PlanRequest& o) {
  RunPlan out;
  MemoryInputs memory;
  std::optional<LedgerCalibration> calibration;
  if (!o.calibrate.empty()) calibration = load_calibration(o.calibrate);
  const int devices = o.devices > 0 ? o.devices : (calibration ? calibration->world_size : 1);
  const double peak =
      o.peak_flops.empty() ? 0 : plan::parse_peak_flops(o.peak_flops, "--peak-flops");
  if (!o.sizes.optimizer.empty())
    plan::optimizer_state_bytes_per_parameter(o.sizes.optimizer);  // validates
  const double bandwidth = static_cast<double>(parse_bytes(o.ckpt_bandwidth, "--ckpt-bandwidth"));
  // 0: not given (a size given is positive: parse_bytes).
  const double device_memory =
      o.device_memory.empty()
          ? 0
          : static_cast<double>(parse_bytes(o.device_memory, "--device-memory"));
  const double host_base =
      o.host_base.empty() ? 0 : static_cast<double>(parse_bytes(o.host_base, "--host-base"));

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
    in = inputs_from_config(config, o, devices, std::nullopt, memory, out.pipeline);
  } else {
    if (!o.overrides.empty()) throw ConfigError("--set needs --config");
    in = plan::inputs_from_sizes(o.sizes, devices, memory);
  }
  in.peak_flops_per_device = peak;
  in.utilization = o.utilization;
  in.eval_utilization = o.eval_utilization;
  in.checkpoint_bandwidth = bandwidth;
  in.mtbf_s = o.mtbf_hours * 3600;
  in.calibration = calibration;
  out.compute = plan::make_plan(in);
  const ComputePlan& plan = out.compute;
  out.calibration = calibration;

  nlohmann::ordered_json& j = out.json;
  j = plan::plan_to_json(plan);
  nlohmann::json& int8 = out.int8;
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
  if (!o.shard.empty()) memory.shard_mode = plan::parse_shard_mode(o.shard, "--shard");
  if (o.devices_per_node < 1) {
    throw ConfigError(str("--devices-per-node ", o.devices_per_node, ": must be at least 1"));
  }
  out.memory = plan::make_memory_plan(memory, in.optimizer, device_memory, host_base);
  j["memory"] = plan::memory_plan_to_json(out.memory);
  if (device_memory > 0 && in.parameters > 0) {
    // The least-communicating layout that fits, on the same devices and pipeline stages.
    plan::LayoutSearchInputs& s = out.layout_inputs;
    s.run = memory;
    s.optimizer = in.optimizer;
    s.parameters = in.parameters;
    s.devices = devices;
    s.pp = out.pipeline.on() ? out.pipeline.shape.pp : 1;
    s.devices_per_node = o.devices_per_node;
    s.device_memory = device_memory;
    out.layouts = plan::search_layouts(s);
    j["memory"]["layout"] = plan::layout_search_to_json(*out.layouts, s);
  }
  // The pipeline's bubble: the share of each step a stage waits for its neighbours, from the
  // schedule's arithmetic (the plan library's simulation shows it exact for equal stages); the
  // training time above assumes none, so it is divided by (1 - bubble) here.
  PipelinePlan& pipeline = out.pipeline;
  if (pipeline.on()) {
    pipeline.bubble = plan::predicted_bubble_fraction(pipeline.shape);
    nlohmann::ordered_json pl{{"pp", pipeline.shape.pp},
                              {"schedule", plan::pipeline_schedule_name(pipeline.shape.kind)},
                              {"virtual_stages", pipeline.shape.virtual_stages},
                              {"micro_batches", pipeline.shape.micro_batches},
                              {"predicted_bubble_fraction", pipeline.bubble}};
    if (!pipeline.stage_blocks.empty()) pl["stage_blocks"] = pipeline.stage_blocks;
    if (plan.timed) pl["train_wall_with_bubble_s"] = plan.train_wall_s / (1 - pipeline.bubble);
    j["pipeline"] = pl;
  }
  nlohmann::ordered_json& check = out.check;
  if (calibration) {
    const LedgerCalibration& c = *calibration;
    check = check_against_calibrating_run(o, c, peak);
    nlohmann::ordered_json cal{{"run_dir", o.calibrate}};
    cal.update(plan::calibration_to_json(c, peak));
    cal["check"] = check;
    j["calibration"] = cal;
  }

  return out;
}

}  // namespace hpctrain::train
