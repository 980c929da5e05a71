#pragma once
// eval.tasks: multiple-choice files a language-model run scores with every evaluation of data.val
// (docs/EVAL.md, "Multiple choice"), and that an offline evaluation of its checkpoints scores
// alike:
//   eval:
//     tasks:
//       - {name: hellaswag, type: multiple-choice, path: data/hellaswag_val.jsonl,
//          batch_size: 8, max_examples: 1000}

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain {
class ConfigSection;
}

namespace hpctrain::eval {

/// One entry of eval.tasks.
struct EvalTask {
  std::string name;               ///< eval.tasks[i].name: the key of its results (default task<i>)
  std::string path;               ///< eval.tasks[i].path: HellaSwag-layout JSON lines
  std::int64_t batch_size = 8;    ///< eval.tasks[i].batch_size: examples per canonical batch
  std::int64_t max_examples = 0;  ///< eval.tasks[i].max_examples: the first N (0: all)
};

/// The eval.tasks of the `eval` section, validated (type multiple-choice, a path, positive batch
/// size, distinct names, no unknown field); empty when absent. Marks the key known. Throws
/// ConfigError naming eval.tasks[i].field. Local.
std::vector<EvalTask> read_eval_tasks(ConfigSection& eval);

}  // namespace hpctrain::eval
