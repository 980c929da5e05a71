#pragma once
// What a model learns and a dataset holds: one enum for both, named by every layer that decides
// on it (data, model, eval, train, plan). Header-only and free of LibTorch. The words are the
// ones HDF5 files, metrics.jsonl and ledger.json carry ("classification", "language_model",
// "regression"); strings end at those edges.

#include <optional>
#include <string>

namespace hpctrain {

/// The values are stored (a dataset index's "kind"): append, never reorder.
enum class Task { kClassification = 0, kLanguageModel = 1, kRegression = 2 };

/// "classification", "language_model", "regression". Local.
inline const char* task_name(Task task) {
  switch (task) {
    case Task::kLanguageModel: return "language_model";
    case Task::kRegression: return "regression";
    case Task::kClassification: break;
  }
  return "classification";
}

/// The task named `name`, or nullopt. Local.
inline std::optional<Task> task_from_name(const std::string& name) {
  for (Task t : {Task::kClassification, Task::kLanguageModel, Task::kRegression}) {
    if (name == task_name(t)) return t;
  }
  return std::nullopt;
}

}  // namespace hpctrain
