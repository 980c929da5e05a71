#pragma once
// Multiple-choice examples for evaluating a language model (docs/EVAL.md, "Multiple choice"), in
// HellaSwag's published JSON-lines layout: one object per line with a context "ctx", candidate
// endings "endings" (a list of strings) and the index of the right one "label" (a number or a
// string of digits); other fields are ignored. Each ending is scored as its own continuation of
// the context: the context's tokens, then the tokens of " " + ending (the layout's endings follow
// the context after a space).

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::data {

class Tokenizer;

/// One example, tokenized.
struct ChoiceExample {
  std::vector<std::int64_t> context;
  std::vector<std::vector<std::int64_t>> endings;
  std::int64_t label = 0;
};

/// Reads and tokenizes every example of `path` with `tokenizer`. Throws DataError (exit 3) naming
/// the file, the line and the field for a file that is missing or not a regular file, a line that
/// is not a JSON object, a missing or mistyped field, fewer than two endings, a label outside
/// them, a context or ending of no tokens, or a file without examples. `key` names where the path
/// came from in messages ("--task multiple-choice", "eval.tasks[0].path"). Local.
std::vector<ChoiceExample> read_multiple_choice(const std::string& path, const Tokenizer& tokenizer,
                                                const std::string& key);

}  // namespace hpctrain::data
