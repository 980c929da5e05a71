#include "text_evaluation.hpp"

#include "hpctrain/eval/generator.hpp"
#include "hpctrain/eval/multiple_choice.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/progress.hpp"

namespace hpctrain::train {

SampleConfig read_sample_config(ConfigSection& s) {
  SampleConfig c;
  c.every = s.get<std::int64_t>("sample_every", c.every);
  if (c.every < 0) s.fail("sample_every", "must be 0 (off) or a number of steps");
  c.tokens = s.get<std::int64_t>("sample_tokens", c.tokens);
  if (c.tokens < 1) s.fail("sample_tokens", "must be at least 1");
  c.prompt = s.get<std::string>("sample_prompt", c.prompt);
  return c;
}

std::unique_ptr<TextEvaluation> TextEvaluation::make(Config& config, const TrainConfig& cfg,
                                                     const model::Model& model, int pp) {
  auto logging = config.section("logging");
  auto eval_section = config.section("eval");
  const SampleConfig sample = read_sample_config(logging);
  std::vector<eval::EvalTask> tasks = eval::read_eval_tasks(eval_section);
  if (sample.every == 0 && tasks.empty()) return nullptr;
  const char* what = sample.every > 0 ? "logging.sample_every" : "eval.tasks";
  if (model.task() != Task::kLanguageModel) {
    throw ConfigError(str(what, " needs a language model; model.name ", cfg.model.name, " is a ",
                          task_name(model.task()), " model: remove it"));
  }
  if (pp > 1) {
    throw ConfigError(str(what, " runs the whole model on one rank group: set parallel.pp: 1"));
  }
  if (!tasks.empty() && cfg.data.val.empty()) {
    throw ConfigError("eval.tasks are scored with every evaluation of data.val: set data.val");
  }
  std::unique_ptr<TextEvaluation> t(new TextEvaluation());
  t->sample_ = sample;
  t->tasks_ = std::move(tasks);
  t->tokenizer_ = data::load_tokenizer(cfg.data.tokenizer);
  if (t->tokenizer_->vocab_size() > cfg.model.vocab_size) {
    throw ConfigError(str("data.tokenizer (", t->tokenizer_->identity(), ") has ",
                          t->tokenizer_->vocab_size(), " tokens but model.vocab_size is ",
                          cfg.model.vocab_size, ": give the tokenizer the data was made with"));
  }
  if (sample.every > 0) {
    t->prompt_ = sample.prompt;
    if (t->prompt_.empty()) {
      const auto eot = t->tokenizer_->eot_id();
      t->prompt_tokens_ = eot ? std::vector<std::int64_t>{*eot} : t->tokenizer_->encode("\n");
      t->prompt_ = t->tokenizer_->decode(t->prompt_tokens_);
    } else {
      t->prompt_tokens_ = t->tokenizer_->encode(t->prompt_);
    }
    if (t->prompt_tokens_.empty()) {
      throw ConfigError("logging.sample_prompt has no tokens: give some text (or leave it empty)");
    }
  }
  for (std::size_t i = 0; i < t->tasks_.size(); ++i) {
    t->examples_.push_back(data::read_multiple_choice(t->tasks_[i].path, *t->tokenizer_,
                                                      str("eval.tasks[", i, "].path")));
  }
  return t;
}

bool TextEvaluation::sample_due(std::int64_t step) const {
  return sample_.every > 0 && step % sample_.every == 0;
}

void TextEvaluation::sample(std::int64_t step, model::Model& model, bool cached, RunLog& log) {
  eval::GenerateOptions o;
  o.max_new_tokens = sample_.tokens;
  o.batch_size = 1;
  o.use_cache = cached;
  const eval::Generation g = eval::generate(model, {prompt_tokens_}, o);
  const auto& tokens = g.continuations.front().tokens;
  const std::string text = tokenizer_->decode(tokens);
  log.record({{"type", "sample"},
              {"step", step},
              {"prompt", prompt_},
              {"text", text},
              {"tokens", tokens},
              {"seconds", g.seconds}});
  log.line(str("sample at step ", step, ": ",
               nlohmann::json(prompt_ + text)
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

nlohmann::ordered_json TextEvaluation::run_tasks(std::int64_t step, model::Model& model,
                                                 comm::ControlPlane& dp, RunLog& log) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < tasks_.size(); ++i) {
    eval::ChoiceOptions o;
    o.batch_size = tasks_[i].batch_size;
    o.max_examples = tasks_[i].max_examples;
    const eval::ChoiceResult r = eval::evaluate_multiple_choice(model, examples_[i], dp, o);
    out[tasks_[i].name] = eval::choice_json(r);
    log.line(str("eval step ", step, " task ", tasks_[i].name, ": ", eval::choice_text(r)));
  }
  return out;
}

}  // namespace hpctrain::train
