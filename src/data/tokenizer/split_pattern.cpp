#include "split_pattern.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {

struct SplitPattern::Compiled {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Compiled() { pcre2_code_free(code); }
};

SplitPattern::SplitPattern(const std::string& pattern, const std::string& where)
    : pattern_(pattern), compiled_(std::make_unique<Compiled>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw DataError(str(where, ": the split pattern cannot be compiled at offset ", offset, ": ",
                        reinterpret_cast<const char*>(message), " (pattern: ", clip(pattern), ")"));
  }
  // Without JIT support (some platforms) the interpreter gives the same matches, only slower.
  compiled_->jit = pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE) == 0;
}

SplitPattern::~SplitPattern() = default;
SplitPattern::SplitPattern(SplitPattern&&) noexcept = default;

void SplitPattern::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  // One match block per thread: creating it per call would cost more than a short match.
  struct MatchData {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~MatchData() { pcre2_match_data_free(data); }
  };
  thread_local MatchData match;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const std::size_t length = text.size();
  std::size_t start = 0;  // where the next search begins
  std::size_t kept = 0;   // end of the last piece emitted
  while (start < length) {
    const int rc = compiled_->jit ? pcre2_jit_match(compiled_->code, subject, length, start, 0,
                                                    match.data, nullptr)
                                  : pcre2_match(compiled_->code, subject, length, start,
                                                PCRE2_NO_UTF_CHECK, match.data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw DataError(str("split pattern failed on the text at byte ", start, ": ",
                          reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.data);
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      if (begin > kept) pieces.push_back(text.substr(kept, begin - kept));
      pieces.push_back(text.substr(begin, end - begin));
      kept = end;
      start = end;
    } else {
      // An empty match: step over one character (UTF-8: skip continuation bytes).
      start = begin + 1;
      while (start < length && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  if (kept < length) pieces.push_back(text.substr(kept));
}

}  // namespace hpctrain::data::detail
