#pragma once
// The byte-level BPE tokenizer that every file kind loads into: added tokens found first, then
// the normalizer, the split patterns (one after the other, Hugging Face's Sequence), and BPE on
// the raw bytes of each piece.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "added_tokens.hpp"
#include "bpe_model.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "split_pattern.hpp"
#include "unicode_normalizer.hpp"

namespace hpctrain::data::detail {

/// What a loader gathers from its files.
struct BpeParts {
  std::unique_ptr<BpeModel> model;
  /// Added and special tokens: text -> id. `raw_added` are found in the text as given,
  /// `normalized_added` after normalization (Hugging Face's "normalized": true).
  std::map<std::string, std::int64_t> raw_added;
  std::map<std::string, std::int64_t> normalized_added;
  UnicodeNormalizer normalizer;
  std::vector<SplitPattern> patterns;
  bool add_prefix_space = false;  ///< Hugging Face ByteLevel: " " before text not starting so
  std::optional<std::int64_t> eot_id;
  std::string identity;
};

/// The tokenizer made of `parts`. Local.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeParts parts);

/// The end-of-text token among `added`: the first of <|endoftext|>, <|end_of_text|>, </s>,
/// <eos> present. Local.
std::optional<std::int64_t> find_eot(const std::map<std::string, std::int64_t>& added);

}  // namespace hpctrain::data::detail
