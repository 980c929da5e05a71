#pragma once

#include <cstdint>
#include <string_view>

namespace hpctrain::runtime {

/// Local. The byte offset of the first byte of `text` that breaks UTF-8 (RFC 3629: no overlong
/// forms, no surrogates, nothing above U+10FFFF, no sequence cut short at the end), or -1 when
/// the whole text is well-formed. One definition for every reader of text: configs, `prepare
/// text`'s files and the tokenizers' input.
std::int64_t first_invalid_utf8(std::string_view text);

}  // namespace hpctrain::runtime
