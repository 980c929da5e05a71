#pragma once
// A pre-tokenizer's split pattern: the regular expression that cuts text into the pieces BPE
// merges within ("'s", " hello", "123", "\n\n"). Patterns need Unicode categories (\p{L}, \p{N}),
// case-insensitive groups and a lookahead (\s+(?!\S)), so they run in PCRE2 with UTF and UCP
// (Unicode properties for \s, \d, \w and case folding), JIT-compiled: the same dialect as the
// Rust and JavaScript engines the reference libraries use, at compiled-code speed.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data::detail {

class SplitPattern {
 public:
  /// Compiles `pattern`; DataError naming `where` and the offset when PCRE2 refuses it. Local.
  SplitPattern(const std::string& pattern, const std::string& where);
  ~SplitPattern();
  SplitPattern(SplitPattern&&) noexcept;
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  /// Appends to `pieces` the pieces of `text` (valid UTF-8, already checked): every match, and
  /// every stretch between matches as a piece of its own (Hugging Face's "Isolated" behaviour;
  /// tiktoken's patterns match every character, so they leave no such stretch). Thread-safe.
  /// Local.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace hpctrain::data::detail
