#pragma once
// Offline evaluation results of a run, in <run_dir>/eval/ (docs/EVAL.md):
//   step_<N>.json          one result per checkpoint, written atomically (tmp + fsync + rename)
//   step_<N>.<tag>.json    the same for evaluations other than the run's default (another split,
//                          batch size, sample limit or precision)
//   results.jsonl          one line per result, appended after the step file
//   best.json, best.<tag>.json   the best checkpoint so far by the configured metric
// The step file is the record of truth: a crash between it and the results.jsonl line is repaired
// by the next has() (the line is appended then), so each result gets exactly one line. Nothing is
// created before the first write(). World rank 0 owns the store; every call is local.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace hpctrain::eval {

/// What makes two evaluations the same one: the same checkpoint (step and manifest checksum) on
/// the same data (split and file checksum) with the same batch size, sample limit and precision.
struct EvalKey {
  std::int64_t step = 0;
  std::string checkpoint_xxh3;  ///< the manifest's self-checksum (manifest_xxh3)
  std::string split;            ///< val | train | test, or "file" for --data
  std::string data_xxh3;        ///< xxh3-64 of the whole data file
  std::string batch_size;       ///< "500", or "auto" for a searched batch size
  std::int64_t max_samples = 0;
  std::string precision = "fp32";
  /// "" for the run's default evaluation (val split, eval.batch_size, eval.max_samples,
  /// run.precision); otherwise names the difference ("train", "bs256", "bf16", ...). Decides the
  /// file names.
  std::string tag;

  nlohmann::json to_json() const;
  /// Everything but step and checkpoint: results with the same family compare with each other
  /// (best checkpoint, tables). Local.
  nlohmann::json family() const;
};

class ResultStore {
 public:
  /// `dir` is <run_dir>/eval (or --results). Creates nothing. Local.
  explicit ResultStore(std::string dir);

  /// Whether a result for `key` exists (its step file holds the same key). Appends its
  /// results.jsonl line if a crash lost it. Local.
  bool has(const EvalKey& key);
  /// Stores `record` (which must hold the key under "key" and `metric` as a number): the step file
  /// atomically, then one results.jsonl line, then the best file for the key's family. Returns
  /// the best record of the family afterwards. Throws Error naming the file when writing fails.
  /// Local.
  nlohmann::json write(const EvalKey& key, const nlohmann::ordered_json& record,
                       const std::string& metric, bool higher_is_better);
  /// The records of results.jsonl whose key has the family of `key`, one per step (the last line
  /// wins), in step order. Unreadable lines are skipped. Local.
  std::vector<nlohmann::json> family_records(const EvalKey& key) const;
  /// Path of the step file of `key`. Local.
  std::string step_file(const EvalKey& key) const;
  /// Path of the step file of `step` with `tag`. Local.
  std::string step_file(std::int64_t step, const std::string& tag) const;
  const std::string& dir() const { return dir_; }

 private:
  std::string results_file() const;
  bool line_present(const nlohmann::json& key_json) const;
  void append_line(const std::string& line);

  std::string dir_;
};

/// Writes `text` to `path` atomically: a temporary file in the same directory, fsynced, renamed
/// over `path`, and the directory fsynced. Throws Error naming the file. Local.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace hpctrain::eval
