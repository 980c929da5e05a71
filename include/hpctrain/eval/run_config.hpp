#pragma once
// The configuration a checkpoint was trained with, read back for offline evaluation: the model to
// rebuild, the data splits it names, and the evaluation settings (batch size, sample limit,
// metric, precision) that make `hpctrain eval` reproduce the periodic evaluation of that step.
// The checkpoint's own config.yaml is preferred (the exact config of that step; a resumed run
// may have changed it), else <run_dir>/config.yaml.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/data/data_config.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/eval/eval_tasks.hpp"
#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/precision.hpp"

namespace hpctrain::model {
class Model;
struct ModelContext;
}  // namespace hpctrain::model

namespace hpctrain::eval {

/// The stored configuration of a run, as far as evaluation needs it.
class RunConfig {
 public:
  /// Parses `text` (a resolved config.yaml) with the section parsers training uses
  /// (model::ModelSpec, PrecisionConfig, data::DataConfig, EvalConfig); `origin` names it in
  /// messages. Throws ConfigError naming the key for a bad value. Local; every rank parses the
  /// same text.
  RunConfig(const std::string& text, const std::string& origin);

  /// The config text of a checkpoint: <checkpoint_dir>/config.yaml, else <run_dir>/config.yaml.
  /// Sets `origin` to the file read. Throws ConfigError when neither exists. Local.
  static std::string read_text(const std::string& checkpoint_dir, const std::string& run_dir,
                               std::string& origin);
  /// Parses the config read_text found for `checkpoint_dir`: one that does not parse is a damaged
  /// checkpoint (CheckpointError, exit 4) when it is the checkpoint's own config.yaml, a config
  /// error (exit 2) when it is the run directory's. Local.
  static RunConfig parse_stored(const std::string& text, const std::string& origin,
                                const std::string& checkpoint_dir);

  /// Builds the model of the `model` section (random weights; load a checkpoint into it).
  /// Local, except that tensor-parallel models may run collectives over ctx.tp.
  std::shared_ptr<model::Model> build_model(const model::ModelContext& ctx);
  /// The model section as YAML text: two checkpoints with the same text share a model. Local.
  const std::string& model_text() const { return model_text_; }

  /// The file of split `split`: "val" (data.val), "train" (data.train), "test" (data.test, when
  /// the config has one). Throws ConfigError (exit 2) for any other name or a split the config
  /// does not define, listing those it does. Local.
  std::string split_path(const std::string& split) const;
  /// Splits the config defines ("train", "val", ...), in that order. Local.
  std::vector<std::string> splits() const;

  const data::DataConfig& data() const { return data_; }
  /// The run's `eval` section (batch size, sample limit, metric), as training read it.
  const EvalConfig& eval() const { return eval_; }
  /// The run's eval.tasks (eval_tasks.hpp), as training scored them. Local.
  const std::vector<EvalTask>& eval_tasks() const { return tasks_; }
  std::int64_t eval_batch_size() const { return eval_.batch_size; }    ///< eval.batch_size
  std::int64_t eval_max_samples() const { return eval_.max_samples; }  ///< eval.max_samples
  Precision precision() const { return precision_.precision; }         ///< run.precision
  /// run.tf32 of the run (absent: LibTorch's default); its evaluation computes as it trained.
  const std::optional<bool>& tf32() const { return precision_.tf32; }
  /// The `model` section as training read it: name, task, input, seq_len, vocab_size.
  const model::ModelSpec& model() const { return model_; }
  const std::string& origin() const { return origin_; }

 private:
  Config config_;
  std::string origin_;
  data::DataConfig data_;
  std::string test_path_;
  EvalConfig eval_;
  std::vector<EvalTask> tasks_;
  PrecisionConfig precision_;
  model::ModelSpec model_;
  std::string model_text_;
};

}  // namespace hpctrain::eval
