#pragma once
// Byte-level BPE on raw bytes: a vocabulary of byte strings, a table of merges between adjacent
// tokens, and the merge loop that turns one pre-tokenized piece into ids. Hugging Face files,
// GPT-2's files and tiktoken rank files all end up here once their tokens are raw bytes.

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "flat_tables.hpp"

namespace hpctrain::data::detail {

class BpeModel {
 public:
  /// A tiktoken vocabulary: `tokens[rank]` is the token of that rank (its id); two adjacent
  /// tokens merge when their concatenation is a token, lowest rank first. Pieces that are one
  /// token whole become it directly, as tiktoken does. `where` names the file for errors. Local.
  static BpeModel from_ranks(std::vector<std::string> tokens, const std::string& where);

  /// A merges vocabulary (Hugging Face, GPT-2): `tokens[id]` (empty: no token has that id), and
  /// `merges` in priority order as pairs of token byte strings. `whole_pieces_first`: a piece
  /// that is one token whole becomes it without merging (Hugging Face's ignore_merges). `where`
  /// names the file for errors. Local.
  static BpeModel from_merges(std::vector<std::string> tokens,
                              const std::vector<std::pair<std::string, std::string>>& merges,
                              bool whole_pieces_first, const std::string& where);

  BpeModel(BpeModel&& other) noexcept;

  /// Appends the ids of one piece (a non-empty byte string). Thread-safe. Local.
  void encode_piece(std::string_view piece, std::vector<std::int64_t>& out) const;

  /// The id of the token with exactly these bytes. Local.
  std::optional<std::int64_t> find(std::string_view bytes) const;

  /// The bytes of token `id`, or nullptr when no token has that id. Local.
  const std::string* bytes_of(std::int64_t id) const {
    if (id < 0 || id >= static_cast<std::int64_t>(tokens_.size())) return nullptr;
    const auto index = static_cast<std::size_t>(id);
    return present_[index] ? &tokens_[index] : nullptr;
  }

  /// One more than the largest id. Local.
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }

 private:
  BpeModel() = default;
  void index_tokens(const std::string& where);
  void merge(std::string_view piece, std::vector<std::uint32_t>& ids) const;
  void merge_long(std::string_view piece, std::vector<std::uint32_t>& ids) const;

  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  StringTable ids_;
  PairTable merges_;
  std::array<std::uint32_t, 256> byte_ids_{};
  bool whole_pieces_first_ = false;

  // Pieces that needed merging, and their ids: words repeat, as every reference library knows.
  mutable std::mutex cache_mutex_;
  mutable StringTable cache_;                     // piece -> offset into cache_ids_
  mutable std::vector<std::uint32_t> cache_ids_;  // count, then the ids
};

}  // namespace hpctrain::data::detail
