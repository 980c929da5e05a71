#pragma once
// Special and added tokens written literally in text ("<|endoftext|>", "<think>"): found before
// anything else is done to the text and turned into their ids whole, as Hugging Face's
// AddedVocabulary and tiktoken's allowed special tokens do. Among matches starting at the same
// place the longest wins; the text between them goes on to normalization and BPE.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data::detail {

class AddedTokens {
 public:
  /// Adds one token (non-empty content). Local.
  void add(const std::string& content, std::int64_t id);

  bool empty() const { return tokens_.empty(); }

  /// Calls text(stretch) for each stretch of `input` between tokens and token(id) for each token,
  /// in order. Thread-safe. Local.
  template <typename OnText, typename OnToken>
  void split(std::string_view input, OnText&& text, OnToken&& token) const {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < input.size(); ++i) {
      const auto first = static_cast<unsigned char>(input[i]);
      if (!starts_[first]) continue;
      const Entry* best = nullptr;
      for (const Entry& e : tokens_) {  // longest first
        if (static_cast<unsigned char>(e.content[0]) == first &&
            input.compare(i, e.content.size(), e.content) == 0) {
          best = &e;
          break;
        }
      }
      if (best == nullptr) continue;
      if (i > kept) text(input.substr(kept, i - kept));
      token(best->id);
      i += best->content.size() - 1;
      kept = i + 1;
    }
    if (kept < input.size()) text(input.substr(kept));
  }

 private:
  struct Entry {
    std::string content;
    std::int64_t id;
  };
  std::vector<Entry> tokens_;  // longest content first
  std::array<bool, 256> starts_{};
};

}  // namespace hpctrain::data::detail
