#include "bpe_tokenizer.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/utf8.hpp"

namespace hpctrain::data::detail {
namespace {

// PCRE2 is told the text is valid (checking at every match would cost O(n) per piece), so
// encode() checks it once.
class BpeTokenizer final : public Tokenizer {
 public:
  explicit BpeTokenizer(BpeParts parts) : parts_(std::move(parts)) {
    for (const auto& [text, id] : parts_.raw_added) raw_.add(text, id);
    for (const auto& [text, id] : parts_.normalized_added) normalized_.add(text, id);
    vocab_size_ = parts_.model->size();
    for (const auto* added : {&parts_.raw_added, &parts_.normalized_added}) {
      for (const auto& [text, id] : *added) {
        vocab_size_ = std::max(vocab_size_, id + 1);
        if (!parts_.model->bytes_of(id)) special_text_[id] = text;
      }
    }
  }

  std::vector<std::int64_t> encode(std::string_view text) const override {
    const std::int64_t bad = runtime::first_invalid_utf8(text);
    if (bad >= 0) {
      throw DataError(str("text to encode is not UTF-8: invalid byte 0x", std::hex,
                          static_cast<int>(static_cast<unsigned char>(text[bad])), std::dec,
                          " at offset ", bad));
    }
    std::vector<std::int64_t> ids;
    ids.reserve(text.size() / 3);
    auto push = [&ids](std::int64_t id) { ids.push_back(id); };
    raw_.split(
        text, [&](std::string_view stretch) { encode_stretch(stretch, ids); }, push);
    return ids;
  }

  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::string text;
    text.reserve(ids.size() * 4);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (const std::string* bytes = parts_.model->bytes_of(ids[i])) {
        text += *bytes;
        continue;
      }
      const auto special = special_text_.find(ids[i]);
      if (special == special_text_.end()) {
        throw DataError(str("token id ", ids[i], " at position ", i, " is not in the vocabulary (",
                            vocab_size_,
                            " ids): decode with the tokenizer the ids were made with"));
      }
      text += special->second;
    }
    return text;
  }

  std::int64_t vocab_size() const override { return vocab_size_; }
  std::optional<std::int64_t> eot_id() const override { return parts_.eot_id; }

  std::optional<std::int64_t> token_id(std::string_view token) const override {
    for (const auto* added : {&parts_.raw_added, &parts_.normalized_added}) {
      const auto it = added->find(std::string(token));
      if (it != added->end()) return it->second;
    }
    return parts_.model->find(token);
  }

  std::string identity() const override { return parts_.identity; }

 private:
  // Text between raw added tokens: normalize, find normalized added tokens, split, merge.
  void encode_stretch(std::string_view stretch, std::vector<std::int64_t>& ids) const {
    std::string normalized;
    stretch = parts_.normalizer.apply(stretch, normalized);
    auto push = [&ids](std::int64_t id) { ids.push_back(id); };
    if (normalized_.empty()) {
      encode_text(stretch, ids);
    } else {
      normalized_.split(
          stretch, [&](std::string_view part) { encode_text(part, ids); }, push);
    }
  }

  void encode_text(std::string_view text, std::vector<std::int64_t>& ids) const {
    std::string prefixed;
    if (parts_.add_prefix_space && !text.empty() && text[0] != ' ') {
      prefixed = " " + std::string(text);
      text = prefixed;
    }
    thread_local std::vector<std::string_view> pieces, next;
    pieces.clear();
    pieces.push_back(text);
    for (const SplitPattern& pattern : parts_.patterns) {
      next.clear();
      for (const std::string_view piece : pieces) pattern.split(piece, next);
      pieces.swap(next);
    }
    for (const std::string_view piece : pieces) {
      if (!piece.empty()) parts_.model->encode_piece(piece, ids);
    }
  }

  BpeParts parts_;
  AddedTokens raw_, normalized_;
  std::map<std::int64_t, std::string> special_text_;  // added tokens that the model lacks
  std::int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeParts parts) {
  return std::make_unique<BpeTokenizer>(std::move(parts));
}

std::optional<std::int64_t> find_eot(const std::map<std::string, std::int64_t>& added) {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
    const auto it = added.find(name);
    if (it != added.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace hpctrain::data::detail
