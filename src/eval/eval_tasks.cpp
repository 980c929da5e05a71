#include "hpctrain/eval/eval_tasks.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <iterator>
#include <set>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {
namespace {

const char* const kFields[] = {"name", "type", "path", "batch_size", "max_examples"};

EvalTask read_task(const YAML::Node& item, std::size_t i, const std::string& at) {
  if (!item.IsMap()) throw ConfigError(str(at, ": expected {name, type: multiple-choice, path}"));
  for (const auto& field : item) {
    const auto f = field.first.as<std::string>();
    if (std::find(std::begin(kFields), std::end(kFields), f) == std::end(kFields)) {
      throw ConfigError(str(
          at, ".", f, ": unknown field of a task (name, type, path, batch_size, max_examples)"));
    }
  }
  EvalTask t;
  try {
    const std::string type = item["type"] ? item["type"].as<std::string>() : "multiple-choice";
    if (type != "multiple-choice") {
      throw ConfigError(str(at, ".type = ", type, ": the one task type is multiple-choice"));
    }
    if (!item["path"]) {
      throw ConfigError(str(at, ": path (the examples' JSON-lines file) is missing"));
    }
    t.path = item["path"].as<std::string>();
    t.name = item["name"] ? item["name"].as<std::string>() : str("task", i);
    if (item["batch_size"]) t.batch_size = item["batch_size"].as<std::int64_t>();
    if (item["max_examples"]) t.max_examples = item["max_examples"].as<std::int64_t>();
  } catch (const YAML::Exception& e) {
    throw ConfigError(str(at, ": ", e.what()));
  }
  if (t.batch_size < 1)
    throw ConfigError(str(at, ".batch_size = ", t.batch_size, ": must be >= 1"));
  if (t.max_examples < 0) {
    throw ConfigError(str(at, ".max_examples = ", t.max_examples, ": must be >= 0 (0: all)"));
  }
  return t;
}

}  // namespace

std::vector<EvalTask> read_eval_tasks(ConfigSection& eval) {
  const std::string text = eval.get_text_or_list("tasks", "");
  std::vector<EvalTask> tasks;
  if (text.empty()) return tasks;
  const std::string key = eval.full_key("tasks");
  YAML::Node list;
  try {
    list = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(str(key, ": not a YAML list (", e.what(), ")"));
  }
  if (!list.IsSequence()) {
    throw ConfigError(str(key, ": expected a list of {name, type: multiple-choice, path}"));
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < list.size(); ++i) {
    tasks.push_back(read_task(list[i], i, str(key, "[", i, "]")));
    if (!names.insert(tasks.back().name).second) {
      throw ConfigError(str(key, ": two tasks are named ", tasks.back().name, ": name each"));
    }
  }
  return tasks;
}

}  // namespace hpctrain::eval
