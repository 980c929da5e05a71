#pragma once
// IDX files (the MNIST / Fashion-MNIST format): a big-endian header (two zero bytes, a type code,
// the number of dimensions, then one uint32 per dimension) followed by the data. Read from gzip
// or plain files alike.

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::data {

/// An IDX array of unsigned bytes (type code 0x08). Local value type.
struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;  ///< row-major, product(dims) bytes
};

/// Reads `path` (gzip'd or plain) and checks the magic number (0x00000800 + rank, unsigned byte
/// data), that the rank is `expected_rank`, and that the data is exactly as long as the header
/// says. Throws DataError naming the file, what was expected and what was found. Local.
IdxArray read_idx(const std::string& path, int expected_rank);

}  // namespace hpctrain::data
