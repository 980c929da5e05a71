#pragma once
// GPT-2's byte-to-unicode mapping: byte-level vocabularies (Hugging Face's ByteLevel, GPT-2's
// encoder.json) write each byte as a printable character (0x20 ' ' as U+0120 'Ġ', 0x0A as U+010A
// 'Ċ'). hpctrain keeps tokens as raw bytes and converts the file's strings once, at loading.

#include <optional>
#include <string>
#include <string_view>

namespace hpctrain::data::detail {

/// The raw bytes a byte-level token string stands for, or nullopt when it holds a character
/// outside the 256-character alphabet (or is not UTF-8). Local.
std::optional<std::string> byte_level_decode(std::string_view token);

/// The byte-level string of raw bytes (inverse of byte_level_decode). Local.
std::string byte_level_encode(std::string_view bytes);

}  // namespace hpctrain::data::detail
