#pragma once
// What a language-model run says in text while it trains (docs/GENERATE.md, docs/EVAL.md):
// logging.sample_every's short greedy samples and eval.tasks' multiple-choice scores. Built and
// validated before the first collective (the tokenizer, the task files); private to the train
// layer.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hpctrain/data/multiple_choice.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/eval/eval_tasks.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain {
class Config;
class ConfigSection;
}  // namespace hpctrain
namespace hpctrain::comm {
class ControlPlane;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::train {

class RunLog;

/// logging.sample_every, logging.sample_tokens, logging.sample_prompt (docs/GENERATE.md).
struct SampleConfig {
  std::int64_t every = 0;  ///< 0: never
  std::int64_t tokens = 32;
  std::string prompt;  ///< "": the tokenizer's end-of-text token, or a newline
};

/// Reads and checks the sample keys of the `logging` section (ConfigError naming the key). Local.
SampleConfig read_sample_config(ConfigSection& logging);

class TextEvaluation {
 public:
  /// Null when the run neither samples nor has eval.tasks (read from `config`'s logging and eval
  /// sections). Otherwise loads data.tokenizer and the task files (DataError naming the file and
  /// line), and checks that the model is a language model on one pipeline stage (ConfigError).
  /// Local: every rank before any collective.
  static std::unique_ptr<TextEvaluation> make(Config& config, const TrainConfig& cfg,
                                              const model::Model& model, int pp);

  /// Whether a sample is due after `step`. Local.
  bool sample_due(std::int64_t step) const;
  /// A greedy sample of logging.sample_tokens tokens after logging.sample_prompt, printed and
  /// recorded ("sample" in metrics.jsonl, TensorBoard text). `cached`: decode from a KV cache
  /// (false under full sharding, whose forward gathers the parameters). Collective over the
  /// world (every rank samples alike; the tp group's ranks together).
  void sample(std::int64_t step, model::Model& model, bool cached, RunLog& log);
  /// Scores every eval.tasks entry; returns {name: choice_json} for the eval record and logs a
  /// line per task. Collective over the world.
  nlohmann::ordered_json run_tasks(std::int64_t step, model::Model& model, comm::ControlPlane& dp,
                                   RunLog& log);

 private:
  TextEvaluation() = default;
  SampleConfig sample_;
  std::vector<eval::EvalTask> tasks_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::string prompt_;
  std::vector<std::int64_t> prompt_tokens_;
  std::vector<std::vector<data::ChoiceExample>> examples_;  // per task
};

}  // namespace hpctrain::train
