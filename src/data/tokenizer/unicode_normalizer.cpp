#include "unicode_normalizer.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include <cstring>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

bool is_ascii(std::string_view text) {
  std::size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, text.data() + i, 8);
    if (word & 0x8080808080808080ull) return false;
  }
  for (; i < text.size(); ++i) {
    if (static_cast<unsigned char>(text[i]) & 0x80) return false;
  }
  return true;
}

const icu::Normalizer2& instance(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = icu::Normalizer2::getNFCInstance(status); break;
    case NormalForm::kNFD: n = icu::Normalizer2::getNFDInstance(status); break;
    case NormalForm::kNFKC: n = icu::Normalizer2::getNFKCInstance(status); break;
    case NormalForm::kNFKD: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || n == nullptr) {
    throw DataError(str("ICU's Unicode normalization data cannot be loaded: ", u_errorName(status),
                        " (is libicu installed completely?)"));
  }
  return *n;
}

}  // namespace

NormalForm normal_form(const std::string& type, const std::string& where) {
  if (type == "NFC") return NormalForm::kNFC;
  if (type == "NFD") return NormalForm::kNFD;
  if (type == "NFKC") return NormalForm::kNFKC;
  if (type == "NFKD") return NormalForm::kNFKD;
  throw DataError(str(where, " is '", type,
                      "': hpctrain's tokenizers know the normalizers NFC, NFD, NFKC, NFKD and "
                      "Sequence of them"));
}

UnicodeNormalizer::UnicodeNormalizer(std::vector<NormalForm> forms) : forms_(std::move(forms)) {
  for (const NormalForm form : forms_) instance(form);  // fail at loading, not at encoding
}

std::string_view UnicodeNormalizer::apply(std::string_view text, std::string& storage) const {
  if (forms_.empty() || is_ascii(text)) return text;
  std::string_view current = text;
  std::string scratch;
  for (const NormalForm form : forms_) {
    const icu::Normalizer2& n = instance(form);
    UErrorCode status = U_ZERO_ERROR;
    const icu::StringPiece piece(current.data(), static_cast<std::int32_t>(current.size()));
    if (n.isNormalizedUTF8(piece, status) && U_SUCCESS(status)) continue;
    scratch.clear();
    status = U_ZERO_ERROR;
    icu::StringByteSink<std::string> sink(&scratch);
    n.normalizeUTF8(0, piece, sink, nullptr, status);
    if (U_FAILURE(status)) {
      throw DataError(str("Unicode normalization failed: ", u_errorName(status)));
    }
    storage.swap(scratch);
    current = storage;
  }
  return current;
}

}  // namespace hpctrain::data::detail
