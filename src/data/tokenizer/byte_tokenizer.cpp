// The byte-level vocabulary of 256: token = byte. No special tokens, so no end-of-text token.

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "tokenizer_internal.hpp"

namespace hpctrain::data::detail {
namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<std::int64_t> encode(std::string_view text) const override {
    std::vector<std::int64_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }

  std::string decode(const std::vector<std::int64_t>& ids) const override {
    std::string text(ids.size(), '\0');
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] > 255) {
        throw DataError(str("token id ", ids[i], " at position ", i,
                            " is outside the byte-level vocabulary [0, 256): decode it with the "
                            "tokenizer the ids were made with (--tokenizer)"));
      }
      text[i] = static_cast<char>(ids[i]);
    }
    return text;
  }

  std::int64_t vocab_size() const override { return 256; }
  std::optional<std::int64_t> eot_id() const override { return std::nullopt; }
  std::optional<std::int64_t> token_id(std::string_view) const override { return std::nullopt; }
  std::string identity() const override { return "bytes"; }
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer() {
  return std::make_unique<ByteTokenizer>();
}

}  // namespace hpctrain::data::detail
