// hpctrain plan: what a run will cost before it starts (FLOPs, wall time, device-hours,
// checkpoint size and interval, memory per device), from a config or from size arguments,
// optionally calibrated on a finished run's ledger.json. docs/PLAN.md documents every figure.
// This file parses the options and prints; train::make_run_plan (train/run_plan.hpp) assembles
// the plan. Local: no collective runs; under a launcher every rank computes the same plan and
// rank 0 prints it.

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/memory_plan.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/run_plan.hpp"
#include "output.hpp"

namespace hpctrain::cli {
namespace {

using plan::ComputePlan;
using plan::LedgerCalibration;
using plan::PlanInputs;

struct PlanOptions {
  train::PlanRequest request;
  bool json = false;
};

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
  if (in.tokens_per_sample > 1 || in.task == Task::kLanguageModel) {
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

// "w + g + s = total" of one row of bytes per parameter.
std::string bytes_sum_text(const plan::ParameterBytes& b) {
  return str(number_text(b.weights), " + ", number_text(b.gradients), " + ", number_text(b.sharded),
             " = ", number_text(b.total()));
}

// The peak's arithmetic: state + activations + what the shard mode adds.
std::string peak_text(const plan::MemoryPlan& p) {
  std::string out = str("(", format_bytes(p.state_bytes), " state + ",
                        format_bytes(p.run_activation_bytes), " activations");
  if (p.gathered_bytes > 0) {
    out += str(" + ", format_bytes(p.gathered_bytes), " gathered units + ",
               format_bytes(p.gathered_gradient_bytes), " their gradients");
  }
  if (p.bucket_in_flight_bytes > 0) {
    out += str(" + ", format_bytes(p.bucket_in_flight_bytes), " buckets in flight");
  }
  return out + str(" = ", format_bytes(p.total_bytes), ")");
}

// The bytes one rank sends per step, by collective.
std::string comm_text(const plan::StepCommunication& c) {
  return str("(", format_bytes(c.total()), ": gather ", format_bytes(c.gather), " + reduce ",
             format_bytes(c.reduce), " + across shard groups ", format_bytes(c.replicas), " + tp ",
             format_bytes(c.tensor_parallel), ")");
}

// The memory plan's rows (docs/PLAN.md, "Memory").
void add_memory_rows(Table& t, const plan::MemoryPlan& p) {
  const plan::MemoryInputs& m = p.in;
  const plan::ShardMode mode = m.mode();
  const int s = m.group();
  // A run that shards nothing or the optimizer state over the whole dp group is titled as before
  // the other modes existed.
  const bool classic = mode <= plan::ShardMode::kOptimizer && s == m.dp;
  t.section(classic ? str("memory per device (", p.optimizer, ", dp=", m.dp, " x tp=", m.tp,
                          ", optimizer ", "state ",
                          mode != plan::ShardMode::kNone ? "sharded" : "not sharded", ")")
                    : str("memory per device (", p.optimizer, ", dp=", m.dp, " x tp=", m.tp,
                          ", parallel.shard ", plan::shard_mode_name(mode), " over S=", s,
                          s < m.dp ? str(" ranks, ", m.dp / s, " replicas") : " ranks", ")"));
  t.row("bytes per parameter", p.run.total(), "B",
        str("(weights ", number_text(p.run.weights), " + gradients ", number_text(p.run.gradients),
            " + optimizer state ", number_text(p.run.sharded), ")"));
  t.row(mode != plan::ShardMode::kNone ? "bytes per parameter, unsharded"
                                       : "bytes per parameter, sharded",
        p.other.total(), "B");
  t.text(str("bytes per parameter by parallel.shard, S=", s),
         str("none ", bytes_sum_text(p.modes[0]), "; optimizer ", bytes_sum_text(p.modes[1]),
             "; gradients ", bytes_sum_text(p.modes[2]), "; full ", bytes_sum_text(p.modes[3])));
  const char* mixed_formula = mode == plan::ShardMode::kNone        ? "(18 for Adam)"
                              : mode == plan::ShardMode::kOptimizer ? "(6 + 12/dp for Adam)"
                              : mode == plan::ShardMode::kGradients ? "(2 + 16/S for Adam)"
                                                                    : "(18/S for Adam)";
  t.row("bf16 weights + fp32 master (Megatron)", p.mixed.total(), "B",
        mode == plan::ShardMode::kOptimizer && !classic ? "(6 + 12/S for Adam)" : mixed_formula);
  t.row("parameters on this device", m.parameters_per_device, "", m.tp > 1 ? "(logical / tp)" : "");
  t.row("weights + gradients + optimizer state", p.state_bytes, "B",
        str("(", format_bytes(p.state_bytes), ")"));
  if (m.decoder) {
    for (auto each : {plan::RecomputeMode::kNone, plan::RecomputeMode::kAttention,
                      plan::RecomputeMode::kBlock}) {
      const double bytes = p.activations[static_cast<int>(each)].total();
      t.row(str("activations per micro-batch, recompute ", plan::recompute_name(each)), bytes, "B",
            str("(", format_bytes(bytes), each == m.recompute ? "; this run)" : ")"));
    }
  } else {
    t.text("activations",
           "estimated for the gpt and llama only (a config, or --layers --width --seq-len "
           "--vocab --heads --micro-batch)");
  }
  if (mode == plan::ShardMode::kFull) {
    const plan::GatherUnits u = m.decoder ? plan::gpt_gather_units(m.shape, m.tp)
                                          : plan::GatherUnits{0, m.parameters_per_device};
    t.row(m.decoder ? "gathered units (2 blocks + root)" : "gathered units (the model)",
          p.gathered_bytes, "B",
          m.decoder
              ? str("((2 x ", number_text(u.block), " + ", number_text(u.root), ") x ",
                    number_text(m.param_dtype_bytes), " B = ", format_bytes(p.gathered_bytes), ")")
              : str("(the whole model, one unit: ", format_bytes(p.gathered_bytes), ")"));
    t.row(m.decoder ? "their gradients in backward (1 block + root)" : "its gradients in backward",
          p.gathered_gradient_bytes, "B", str("(", format_bytes(p.gathered_gradient_bytes), ")"));
  }
  if (mode == plan::ShardMode::kGradients) {
    t.row("gradient buckets in flight (2 x parallel.bucket_mb)", p.bucket_in_flight_bytes, "B",
          str("(", format_bytes(p.bucket_in_flight_bytes), ")"));
  }
  if (p.gathered_bytes > 0 || p.bucket_in_flight_bytes > 0) {
    t.row("peak (state + activations + transient)", p.total_bytes, "B", peak_text(p));
  } else {
    t.row("total (state + this run's activations)", p.total_bytes, "B",
          str("(", format_bytes(p.total_bytes), ")"));
  }
  t.row("communication per step per rank", p.comm.total(), "B", comm_text(p.comm));
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
                     "; shard the model state (parallel.shard: optimizer, gradients or full), "
                     "recompute activations (model.recompute), or use a smaller "
                     "data.batch_size or more tp"));
  }
}

// One layout of the search, in a line: its settings, bytes per parameter, peak and bytes sent.
std::string layout_text(const plan::LayoutCandidate& c) {
  const plan::MemoryPlan& p = c.plan;
  return str(plan::layout_settings(p.in), ": ", number_text(p.run.total()), " B/param, peak ",
             format_bytes(p.total_bytes), p.fits() ? " (fits)" : " (too big)", ", sends ",
             format_bytes(p.comm.total()), "/step");
}

// --device-memory's choice of layout (docs/PLAN.md, "Choosing a layout").
void add_layout_rows(Table& t, const plan::LayoutSearch& search,
                     const plan::LayoutSearchInputs& in) {
  t.section(str("layout for --device-memory ", format_bytes(in.device_memory), " (", in.devices,
                " devices, ", in.devices_per_node, " per node, ", search.candidates.size(),
                " layouts tried: least communication that fits)"));
  if (search.chosen < 0) {
    const plan::LayoutCandidate* smallest = nullptr;
    for (const auto& c : search.candidates) {
      if (!smallest || c.plan.total_bytes < smallest->plan.total_bytes) smallest = &c;
    }
    t.text("chosen", str("none fits; the smallest is ", layout_text(*smallest),
                         ": more devices, a smaller data.batch_size or more parallel.pp"));
  } else {
    const plan::LayoutCandidate& c = search.candidates[static_cast<std::size_t>(search.chosen)];
    const plan::MemoryPlan& p = c.plan;
    t.text("chosen", plan::layout_settings(p.in));
    t.row("its bytes per parameter", p.run.total(), "B",
          str("(", bytes_sum_text(p.run), ", S=", p.in.group(), ")"));
    t.row("its parameters on a device", p.in.parameters_per_device, "");
    t.row("its peak", p.total_bytes, "B", peak_text(p));
    t.row("its communication per step per rank", p.comm.total(), "B", comm_text(p.comm));
  }
  for (auto mode : {plan::ShardMode::kNone, plan::ShardMode::kOptimizer,
                    plan::ShardMode::kGradients, plan::ShardMode::kFull}) {
    const int i = search.best_of_mode[static_cast<int>(mode)];
    if (i < 0) continue;
    t.text(str("best with parallel.shard=", plan::shard_mode_name(mode)),
           layout_text(search.candidates[static_cast<std::size_t>(i)]));
  }
}

int run_plan(CommandContext& ctx, PlanOptions& options) {
  const train::PlanRequest& o = options.request;
  const train::RunPlan result = train::make_run_plan(o);
  const ComputePlan& plan = result.compute;
  const plan::MemoryPlan& memory = result.memory;
  const std::optional<LedgerCalibration>& calibration = result.calibration;
  const nlohmann::ordered_json& check = result.check;
  const nlohmann::json& int8 = result.int8;
  if (ctx.runtime.world_rank() != 0) return 0;
  if (options.json) {
    print_json(result.json);
    return 0;
  }
  Table t;
  add_plan_rows(t, plan);
  add_memory_rows(t, memory);
  if (result.layouts) add_layout_rows(t, *result.layouts, result.layout_inputs);
  if (result.pipeline.on()) {
    const train::PipelinePlan& pipeline = result.pipeline;
    const auto& shape = pipeline.shape;
    t.section(str("pipeline (pp=", shape.pp, " ", plan::pipeline_schedule_name(shape.kind),
                  shape.virtual_stages > 1 ? str(" V=", shape.virtual_stages) : std::string(), ", ",
                  shape.micro_batches, " micro-batches)"));
    t.row("bubble: (pp-1)/(V m+pp-1)", pipeline.bubble * 100, "% of a step");
    if (plan.timed) {
      t.row("training wall time with the bubble", plan.train_wall_s / (1 - pipeline.bubble), "s",
            human_seconds(plan.train_wall_s / (1 - pipeline.bubble)));
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

const CommandRegistration plan_command = command<PlanOptions>(
    "plan",
    "Estimate a run before it starts: FLOPs, wall time, device-hours, checkpoint size and "
    "interval (docs/PLAN.md)",
    [](CLI::App& app, PlanOptions& options) {
      train::PlanRequest& o = options.request;
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
                     "Memory of one device (80GiB, 141GB): say whether the run fits, and the "
                     "least-communicating layout (shard mode, tp, shard group, recompute) that "
                     "does")
          ->group(memory);
      app.add_option("--host-base", o.host_base,
                     "Resident memory of a training process before its model (e.g. 203MiB, the "
                     "default): the CPU host's peak resident memory adds it")
          ->group(memory);
      app.add_flag("--shard-optimizer", o.sizes.shard_optimizer,
                   "Plan with the optimizer state sharded over the data-parallel group "
                   "(parallel.shard: optimizer; --shard picks any mode)")
          ->group(memory);
      app.add_option("--shard", o.shard,
                     "Plan with parallel.shard = none | optimizer | gradients | full whatever the "
                     "config says")
          ->group(memory);
      app.add_option("--devices-per-node", o.devices_per_node,
                     "Devices per node (default 8): tp stays within a node, and "
                     "parallel.shard_group: node is that many dp ranks / tp")
          ->group(memory)
          ->check(CLI::PositiveNumber);
      app.add_option("--heads", o.sizes.heads,
                     "Attention heads (activation estimate, size arguments)")
          ->group(memory)
          ->check(CLI::NonNegativeNumber);
      app.add_option("--micro-batch", o.sizes.micro_batch,
                     "Sequences per micro-batch (activation estimate, size arguments)")
          ->group(memory)
          ->check(CLI::NonNegativeNumber);
      app.add_flag("--json", options.json, "Print JSON with every number instead of a table");
    },
    run_plan, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
