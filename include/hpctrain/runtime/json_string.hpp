#pragma once
// A string as a JSON string literal, for the files runtime writes by hand where no JSON library
// is linked or allowed (the outcome file, flight records: written from signal-time paths).

#include <cstdio>
#include <string>

namespace hpctrain::runtime {

/// `text` quoted and escaped as a JSON string ("\"a\\\"b\""). Local; allocates.
inline std::string json_quoted(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace hpctrain::runtime
