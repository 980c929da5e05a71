// hpctrain eval: offline evaluation of committed checkpoints on any world size and grid: one
// checkpoint (--checkpoint), every checkpoint of a run not yet evaluated (--checkpoints), or a
// watcher beside a training job (--watch). docs/EVAL.md.

#include "command.hpp"
#include "hpctrain/eval/offline_evaluator.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct EvalArgs {
  std::string checkpoint;
  std::string checkpoints;
  std::string watch;
  std::string batch_size;
  std::string memory_budget;
  std::int64_t max_samples = -1;
  bool bf16 = false;
  bool fp32 = false;
  int tp = 1;
  eval::OfflineOptions options;
  CLI::App* app = nullptr;  ///< the command's parser: which options were given
};

// Options are checked on every rank, identically, before any collective.
eval::OfflineOptions checked_options(const EvalArgs& a) {
  const CLI::App* app = a.app;
  eval::OfflineOptions o = a.options;
  const int modes = !a.checkpoint.empty() + !a.checkpoints.empty() + !a.watch.empty();
  if (modes != 1) {
    throw ConfigError(
        "give exactly one of --checkpoint PATH, --checkpoints RUN_DIR or --watch RUN_DIR");
  }
  o.split_given = app->count("--split") > 0;
  if (o.split != "val" && o.split != "train" && o.split != "test") {
    throw ConfigError(str("unknown split '", o.split, "': use --split val, train or test"));
  }
  if (!a.batch_size.empty() && a.batch_size != "auto") {
    std::size_t used = 0;
    long long b = 0;
    try {
      b = std::stoll(a.batch_size, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != a.batch_size.size() || b < 1) {
      throw ConfigError(
          str("--batch-size ", a.batch_size, ": expected a positive integer or auto"));
    }
    o.batch_size = std::to_string(b);
  } else {
    o.batch_size = a.batch_size;
  }
  if (!a.memory_budget.empty()) o.memory_budget = parse_bytes(a.memory_budget, "--memory-budget");
  o.max_samples = a.max_samples;
  if (a.bf16 && a.fp32) throw ConfigError("--bf16 and --fp32 contradict each other: pick one");
  if (a.bf16) o.precision = Precision::kBf16;
  if (a.fp32) o.precision = Precision::kFp32;
  if (o.compare_fp32 && !a.bf16) {
    throw ConfigError("--compare-fp32 compares a bf16 evaluation with fp32: add --bf16");
  }
  if (a.tp < 1) throw ConfigError(str("--tp ", a.tp, ": must be a positive integer"));
  if (app->count("--prune-scope") > 0 && o.compression.prune == 0) {
    throw ConfigError("--prune-scope chooses how --prune spreads its zeros: add --prune SPARSITY");
  }
  if (app->count("--prune") > 0 && o.compression.prune == 0) {
    throw ConfigError(
        "--prune 0: the sparsity is in (0, 1), e.g. --prune 0.5 (omit --prune for none)");
  }
  o.compression.validate();
  if (o.compression.any() && o.precision == Precision::kBf16) {
    throw ConfigError("--quantize/--prune compare with a float32 evaluation: drop --bf16");
  }
  if (o.compression.any() && !o.precision) o.precision = Precision::kFp32;
  if (!(o.max_drop >= 0)) throw ConfigError(str("--max-drop ", o.max_drop, ": must be >= 0"));
  if (!o.save_outputs.empty() && a.checkpoint.empty()) {
    throw ConfigError(
        "--save-outputs writes the outputs of one evaluation: use it with --checkpoint");
  }
  if (!o.save_outputs.empty()) o.force = true;  // the outputs come from running it, not a result
  return o;
}

int run_eval(CommandContext& ctx, EvalArgs& a) {
  eval::OfflineOptions options = checked_options(a);
  if (!options.save_outputs.empty() && ctx.runtime.world_size() > 1) {
    throw ConfigError(
        "--save-outputs runs as one process (the outputs stay on the rank that "
        "computed them): start hpctrain eval without mpirun/srun");
  }
  Session session = make_session(ctx, a.tp);
  eval::OfflineEvaluator evaluator(environment(ctx, session), std::move(options));
  int code = kExitOk;
  if (!a.checkpoint.empty()) code = evaluator.evaluate_checkpoint(a.checkpoint);
  if (!a.checkpoints.empty()) code = evaluator.evaluate_run(a.checkpoints);
  if (!a.watch.empty()) code = evaluator.watch(a.watch);
  session.control.world->barrier();
  return code;
}

const CommandRegistration eval_command = command<EvalArgs>(
    "eval", "Evaluate checkpoints (one, every one of a run, or watch a training run)",
    [](CLI::App& app, EvalArgs& a) {
      a.app = &app;
      app.add_option("--checkpoint", a.checkpoint,
                     "A checkpoint directory (step_<N>), or a run directory for its newest "
                     "checkpoint that verifies");
      app.add_option("--checkpoints", a.checkpoints,
                     "A run directory: evaluate every committed checkpoint not yet evaluated");
      app.add_option("--watch", a.watch,
                     "A run directory: evaluate checkpoints as training commits them, until "
                     "training writes training_complete.json or --timeout passes");
      app.add_option("--data", a.options.data,
                     "Evaluate on this HDF5 file instead of a split of the stored config");
      app.add_option("--split", a.options.split,
                     "val (data.val, default), train (data.train) or test (data.test) of the "
                     "checkpoint's stored config");
      app.add_option("--batch-size", a.batch_size,
                     "Evaluation batch: a number, or auto (largest power of two that fits the "
                     "memory budget with the best samples/s). Default: eval.batch_size of the "
                     "stored config");
      app.add_option("--memory-budget", a.memory_budget,
                     "Activation memory per rank for --batch-size auto, e.g. 2G (default: half "
                     "of MemAvailable / ranks on the node)");
      app.add_option("--max-samples", a.max_samples,
                     "Evaluate the first N samples (0: all). Default: eval.max_samples of the "
                     "stored config");
      app.add_option("--tp", a.tp, "Tensor-parallel size of the evaluation grid (default 1)");
      app.add_flag("--bf16", a.bf16, "bfloat16 autocast (default: run.precision of the config)");
      app.add_flag("--fp32", a.fp32, "float32 (default: run.precision of the config)");
      app.add_flag("--compare-fp32", a.options.compare_fp32,
                   "With --bf16: evaluate in fp32 too and record the metric difference");
      app.add_option("--quantize", a.options.compression.quantize,
                     "int8: evaluate with the linear layers in int8 (dynamic quantization), "
                     "beside float32");
      app.add_option("--prune", a.options.compression.prune,
                     "Sparsity in (0, 1): zero that fraction of the weights by magnitude, and "
                     "evaluate beside float32");
      app.add_option("--prune-scope", a.options.compression.scope,
                     "global (one threshold over all prunable weights, default) or layer");
      app.add_option("--max-drop", a.options.max_drop,
                     "Warn when compression costs more accuracy than this (absolute; relative "
                     "loss for language models; default 0.05)");
      app.add_option("--save-outputs", a.options.save_outputs,
                     "With --checkpoint, one process: write the model's outputs (logits) for the "
                     "evaluated samples to this file, one float32 tensor for torch.load");
      app.add_option("--prefetch", a.options.prefetch, "Evaluation batches read ahead (default 2)")
          ->check(CLI::NonNegativeNumber);
      app.add_option("--results", a.options.results_dir,
                     "Directory for the results (default: <run_dir>/eval)");
      app.add_flag("--force", a.options.force,
                   "Evaluate again even when a result for the same checkpoint and data exists");
      app.add_option("--poll", a.options.poll_seconds,
                     "--watch: seconds between looks at the run (default 10)")
          ->check(CLI::PositiveNumber);
      app.add_option("--timeout", a.options.timeout_seconds,
                     "--watch: stop after this many seconds without a new checkpoint (default "
                     "3600)")
          ->check(CLI::NonNegativeNumber);
    },
    run_eval);

}  // namespace
}  // namespace hpctrain::cli
