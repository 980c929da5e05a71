#pragma once
// A tokenizer's Unicode normalizer (Hugging Face's "normalizer": NFC, NFD, NFKC, NFKD, or a
// sequence of them), applied to text before it is split. ICU does the normalization: it reads
// and writes UTF-8 directly and checks first whether the text is already normalized, which almost
// all text is. ASCII skips even that.

#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data::detail {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

/// The form of a Hugging Face normalizer type name ("NFC"), or DataError naming `where`. Local.
NormalForm normal_form(const std::string& type, const std::string& where);

class UnicodeNormalizer {
 public:
  /// `forms` applied in order (none: text unchanged). Local.
  explicit UnicodeNormalizer(std::vector<NormalForm> forms = {});

  bool empty() const { return forms_.empty(); }

  /// `text` normalized: a view of `text` itself when it is normalized already, else of
  /// `storage`. `text` is valid UTF-8. Thread-safe. Local.
  std::string_view apply(std::string_view text, std::string& storage) const;

 private:
  std::vector<NormalForm> forms_;
};

}  // namespace hpctrain::data::detail
