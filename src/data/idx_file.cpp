#include "hpctrain/data/idx_file.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

std::vector<std::uint8_t> read_all(const std::string& path) {
  runtime::require_regular_file(path, runtime::FileKind::kData, "IDX file",
                                "pass the directory that holds the Fashion-MNIST files with "
                                "--from, or install dataset-fashion-mnist");
  gzFile in = gzopen(path.c_str(), "rb");
  if (!in) throw DataError(str("IDX file '", path, "' cannot be opened for reading"));
  std::vector<std::uint8_t> bytes;
  std::uint8_t buffer[1 << 16];
  for (;;) {
    const int n = gzread(in, buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(in, &code);
      gzclose(in);
      throw DataError(str("IDX file '", path, "' is truncated or corrupt (gzip: ", message,
                          "): download or reinstall it"));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
  int code = Z_OK;
  std::string message = gzerror(in, &code);
  gzclose(in);
  // zlib reports a gzip stream cut short as Z_BUF_ERROR after returning what it could.
  if (code != Z_OK && code != Z_STREAM_END) {
    throw DataError(str("IDX file '", path, "' is truncated or corrupt (gzip: ", message,
                        "): download or reinstall it"));
  }
  return bytes;
}

std::uint32_t big_endian(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  std::vector<std::uint8_t> bytes = read_all(path);
  const std::uint32_t want_magic = 0x00000800u + static_cast<std::uint32_t>(expected_rank);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(expected_rank);
  if (bytes.size() < 4) {
    throw DataError(str("IDX file '", path, "' holds ", bytes.size(),
                        " bytes, not even an IDX header: download or reinstall it"));
  }
  const std::uint32_t magic = big_endian(bytes.data());
  if (magic != want_magic) {
    char found[16], want[16];
    std::snprintf(found, sizeof found, "0x%08X", magic);
    std::snprintf(want, sizeof want, "0x%08X", want_magic);
    throw DataError(str("IDX file '", path, "' has magic number ", found, ", expected ", want,
                        " (unsigned bytes, ", expected_rank, " dimension",
                        expected_rank == 1 ? "" : "s",
                        "): is it the right file (images vs labels) and an IDX file at all?"));
  }
  if (bytes.size() < header) {
    throw DataError(str("IDX file '", path, "' is truncated inside its header (", bytes.size(),
                        " of ", header, " bytes): download or reinstall it"));
  }
  IdxArray out;
  std::uint64_t expected = 1;
  for (int d = 0; d < expected_rank; ++d) {
    const std::uint32_t extent = big_endian(bytes.data() + 4 + 4 * d);
    out.dims.push_back(extent);
    expected *= extent;
  }
  const std::uint64_t found = bytes.size() - header;
  if (found != expected) {
    std::string shape;
    for (auto d : out.dims) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    throw DataError(str("IDX file '", path, "' is ", found < expected ? "truncated" : "too long",
                        ": its header promises ", shape, " = ", expected,
                        " bytes of data, the file holds ", found, ": download or reinstall it"));
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

}  // namespace hpctrain::data
