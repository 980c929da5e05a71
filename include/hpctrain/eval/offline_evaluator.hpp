#pragma once
// `hpctrain eval`: offline evaluation of committed checkpoints on any world size and grid
// (docs/EVAL.md). One checkpoint, every checkpoint of a run not yet evaluated, or a watcher that
// evaluates checkpoints as a training job commits them, until the run's completion marker
// (<run_dir>/training_complete.json) appears or no new checkpoint came for a while.
//
// World rank 0 decides everything that depends on files (which checkpoints exist, whether they
// verify, whether a result exists, the data file's checksum) and broadcasts the decision; then
// all ranks rebuild the model from the checkpoint's stored config, load the weights (resharding
// for the eval grid's tp), and evaluate with the exact distributed evaluator. Results are written
// by world rank 0 only (ResultStore), atomically, after the evaluation finished: a crash leaves
// no partial result, and a rerun redoes only what has no result.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hpctrain/comm/environment.hpp"
#include "hpctrain/eval/compression.hpp"
#include "hpctrain/runtime/precision.hpp"

namespace hpctrain::runtime {
class Runtime;
class ProcessGrid;
}  // namespace hpctrain::runtime

namespace hpctrain::eval {

/// What `hpctrain eval` was asked (docs/EVAL.md lists the options).
struct OfflineOptions {
  std::string data;                 ///< --data FILE ("" = a split of the stored config)
  std::string split = "val";        ///< --split val | train | test
  bool split_given = false;         ///< --split was passed (with --data it labels the file)
  std::string batch_size;           ///< "" = eval.batch_size of the stored config; "auto"; a number
  std::uint64_t memory_budget = 0;  ///< --memory-budget bytes per rank (0 = default)
  std::int64_t max_samples = -1;    ///< -1 = eval.max_samples of the stored config; 0 = all
  std::optional<Precision>
      precision;                  ///< --bf16 / --fp32; none: run.precision of the stored config
  bool compare_fp32 = false;      ///< with bf16: also evaluate in fp32 and record the difference
  int prefetch = 2;               ///< evaluation batches read ahead
  std::string results_dir;        ///< "" = <run_dir>/eval
  bool force = false;             ///< evaluate again even when a result exists
  double poll_seconds = 10;       ///< --watch: seconds between looks at the run
  double timeout_seconds = 3600;  ///< --watch: give up after this long without a new checkpoint
  CompressionSpec compression;    ///< --quantize / --prune: compress in memory, compare with fp32
  /// --max-drop: warn when compression costs more than this much accuracy (absolute), or, for
  /// language models and regression, this fraction of the float32 loss.
  double max_drop = 0.05;
  /// --save-outputs: write the model's outputs for the evaluated samples (the compressed model's
  /// when compressing) to this file in PyTorch's format, one float32 tensor [samples, ...]
  /// (torch.load returns it); one process only. Empty: none.
  std::string save_outputs;
  /// --task multiple-choice FILE: score the checkpoints on this HellaSwag-layout JSON-lines file
  /// (docs/EVAL.md, "Multiple choice") instead of a data split; results are tagged
  /// mc-<file stem>-<checksum>. Empty: the split's loss and accuracy.
  std::string choice_file;
};

class OfflineEvaluator {
 public:
  /// Collective over the world (duplicates the world communicator for its decisions).
  OfflineEvaluator(comm::Environment env, OfflineOptions options);
  ~OfflineEvaluator();
  OfflineEvaluator(const OfflineEvaluator&) = delete;
  OfflineEvaluator& operator=(const OfflineEvaluator&) = delete;

  /// Evaluates one checkpoint: a step_<N> directory, or a run directory (its newest checkpoint
  /// that verifies). Skips it when a result for the same key exists (unless force). Throws
  /// CheckpointError (exit 4) when it does not verify or load, DataError (exit 3) for data that
  /// does not fit, ConfigError (exit 2) for an unknown split or bad options; nothing is written
  /// then. Returns the exit code (0). Collective over the world.
  int evaluate_checkpoint(const std::string& path);
  /// Evaluates every committed checkpoint of `run_dir` without a result, in step order. One that
  /// does not verify is reported and skipped; one deleted meanwhile (retention) is skipped.
  /// Returns 0, or 4 when some checkpoint did not verify. Collective over the world.
  int evaluate_run(const std::string& run_dir);
  /// Like evaluate_run, again every poll interval, until the completion marker exists and every
  /// checkpoint committed before it is evaluated (0), or no new checkpoint came for
  /// timeout_seconds (0, with a warning). Returns 4 when some checkpoint did not verify.
  /// Collective over the world.
  int watch(const std::string& run_dir);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hpctrain::eval
