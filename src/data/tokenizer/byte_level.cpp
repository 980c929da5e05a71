#include "byte_level.hpp"

#include <array>
#include <cstdint>

namespace hpctrain::data::detail {
namespace {

// code point of each byte, and byte of each code point below 324 (-1: none); as GPT-2's
// bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100.. in byte order.
struct Tables {
  std::array<std::uint32_t, 256> to_char{};
  std::array<int, 324> to_byte{};
  Tables() {
    to_byte.fill(-1);
    std::uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char[static_cast<std::size_t>(b)] = printable ? static_cast<std::uint32_t>(b) : next++;
      to_byte[to_char[static_cast<std::size_t>(b)]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

std::optional<std::string> byte_level_decode(std::string_view token) {
  const Tables& t = tables();
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    std::uint32_t cp = 0;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3Fu);
      i += 2;
    } else {
      return std::nullopt;  // every character of the alphabet lies below U+0800
    }
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
    out += static_cast<char>(t.to_byte[cp]);
  }
  return out;
}

std::string byte_level_encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  for (const char b : bytes) {
    const std::uint32_t cp = t.to_char[static_cast<unsigned char>(b)];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

}  // namespace hpctrain::data::detail
