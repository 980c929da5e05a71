#include "hpctrain/runtime/utf8.hpp"

namespace hpctrain::runtime {

std::int64_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const auto n = static_cast<std::int64_t>(text.size());
  std::int64_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    int extra = 0;
    unsigned char low = 0x80, high = 0xBF;  // allowed range of the first continuation byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) low = 0xA0;   // no overlong three-byte forms
      if (c == 0xED) high = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) low = 0x90;   // no overlong four-byte forms
      if (c == 0xF4) high = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (i + extra >= n) return i;  // cut short at the end
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = s[i + k];
      if (cc < (k == 1 ? low : 0x80) || cc > (k == 1 ? high : 0xBF)) return i;
    }
    i += 1 + extra;
  }
  return -1;
}

}  // namespace hpctrain::runtime
