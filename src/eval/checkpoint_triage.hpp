#pragma once
// Private to the eval layer: what world rank 0 decides about one checkpoint before the ranks
// evaluate it (its triage), and the file work behind that decision (manifest, stored config,
// data checksum, existing result, verification). The decision travels to the other ranks as JSON.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "hpctrain/eval/offline_evaluator.hpp"
#include "hpctrain/eval/result_store.hpp"

namespace hpctrain::eval {
class RunConfig;
}  // namespace hpctrain::eval

namespace hpctrain::eval::detail {

/// What to do with a checkpoint.
enum class Verdict {
  kEvaluate,  ///< go ahead
  kDone,      ///< a result exists (result_file)
  kGone,      ///< the directory vanished (retention removed it)
  kBad,       ///< it does not verify (message)
  kError,     ///< bad input that ends the command (code, message)
};

struct CheckpointDecision {
  Verdict verdict = Verdict::kEvaluate;
  std::string message;
  int code = 0;
  std::string dir;
  std::int64_t step = -1;
  std::int64_t epoch = 0;
  std::int64_t consumed_samples = 0;
  std::string config_text;
  std::string config_origin;
  std::string data_path;  ///< as the config or --data names it
  std::string data_key;   ///< "data.val", "--data": named in messages
  std::uint64_t data_bytes = 0;
  /// The arithmetic of the evaluation: --bf16 / --fp32, else run.precision of the stored config.
  Precision precision = Precision::kFp32;
  EvalKey key;
  std::string result_file;  ///< the existing result (done)
  /// A compressed checkpoint: its manifest's trainer_state.compression record (else null).
  nlohmann::json compression;
  /// The float32 checkpoint to compare with: the source of a compressed checkpoint when it still
  /// verifies, or `dir` itself for --quantize / --prune; empty when there is none.
  std::string baseline_dir;
  std::string baseline_note;  ///< why there is no baseline
  /// What training up to this checkpoint cost in time (training_cost), or null when unknown.
  nlohmann::json training_cost;

  nlohmann::json to_json() const;
  static CheckpointDecision from_json(const nlohmann::json& j);
};

/// The training time behind the checkpoint of `step` of `run_dir`: the run's metrics.jsonl train
/// records up to that step (step_time x steps of each logging interval, so evaluation and
/// checkpoint pauses are not counted) times `world_size` ranks, as {"rank_seconds",
/// "wall_seconds", "steps_timed", "source"}; null when the run left no train records. Local.
nlohmann::json training_cost(const std::string& run_dir, std::int64_t step,
                             std::int64_t world_size);

/// The "cost" field of a result: training to this checkpoint (rank-seconds, device-hours,
/// FLOPs = 3 x forward FLOPs x samples consumed) against this evaluation (rank-seconds, FLOPs =
/// forward FLOPs x samples) and their ratios. Local.
nlohmann::ordered_json cost_record(const nlohmann::json& training, double forward_flops,
                                   std::int64_t consumed_samples, double eval_seconds,
                                   int world_size, std::int64_t eval_samples);
/// One line for the log from a cost record. Local.
std::string cost_line(const nlohmann::json& cost);

/// World rank 0's side of the decisions. Local.
class CheckpointTriage {
 public:
  explicit CheckpointTriage(const OfflineOptions& options) : options_(options) {}
  /// The decision on checkpoint directory `dir` of `run_dir`. Never throws for bad input: errors
  /// become Verdict::kError with the exit code, so every rank can throw the same one.
  CheckpointDecision decide(const std::string& run_dir, const std::string& dir, ResultStore& store);

 private:
  struct Digest {
    std::uint64_t bytes = 0;
    std::int64_t mtime_ns = 0;
    std::string xxh3;
  };
  const Digest& digest(const std::string& path, const std::string& key);
  /// decide()'s evaluation key of `p` (read with `config`): the data and its checksum, batch
  /// size, sample limit and precision; returns the tag naming how they differ from the run's.
  std::string evaluation_key(const RunConfig& config, CheckpointDecision& p);
  /// decide()'s compression of `p`: the checkpoint's own (and its float32 source), or the one
  /// the options ask for (its name added to `tag`).
  void compression_of(const nlohmann::json& manifest, const std::string& dir, CheckpointDecision& p,
                      std::string& tag);

  const OfflineOptions& options_;
  std::map<std::string, Digest> digests_;
  std::string buffer_;
};

}  // namespace hpctrain::eval::detail
