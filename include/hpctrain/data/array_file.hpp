#pragma once
// Array files that `hpctrain prepare numpy | tokens` converts (docs/DATA.md, "Commands"): NumPy's
// .npy, llm.c's .bin token files and raw little-endian arrays. Opening one checks its header and
// length against the file and names the byte offset of any problem (DataError, exit 3).

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::data {

/// A checked array file: where its values start and what they are. Local value type.
struct ArrayFile {
  std::string path;
  std::string what;    ///< "token file", "--inputs file", ... (named in messages)
  std::string format;  ///< "npy", "llmc" or "raw"
  std::string dtype;   ///< "uint16", "float32", ...
  int element_bytes = 0;
  std::int64_t data_offset = 0;  ///< byte offset of the first value
  std::vector<std::int64_t> shape;
  std::int64_t count = 0;  ///< values in all
};

/// A .npy file (versions 1-3, C order, little-endian number types). Local.
ArrayFile open_npy(const std::string& path, const std::string& what);

/// A token file: `format` auto (by content: .npy magic, llm.c magic, else raw), npy, llmc or raw;
/// `raw_dtype` the element type of a raw file (uint16 when empty; must agree with an llm.c
/// header). Refuses truncated files and non-integer dtypes with the byte offset. Local.
ArrayFile open_token_file(const std::string& path, const std::string& format,
                          const std::string& raw_dtype);

/// Values [first, first + count) of an integer array as int64 (unsigned 64-bit values above
/// INT64_MAX read as -1). Local.
void read_as_int64(const ArrayFile& file, std::int64_t first, std::int64_t count,
                   std::int64_t* out);
/// Values [first, first + count) of a float32, float64 or uint8 array as float32. Local.
void read_as_float(const ArrayFile& file, std::int64_t first, std::int64_t count, float* out);

}  // namespace hpctrain::data
