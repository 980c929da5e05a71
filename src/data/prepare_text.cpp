// UTF-8 text files -> byte-level token files train.h5 / val.h5.

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

constexpr std::int64_t kByteVocab = 256;

// Offset of the first byte that breaks UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF), or -1 when the text is valid.
std::int64_t first_invalid_utf8(const std::string& text) {
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
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return i;
    }
    if (i + extra >= n) return i;  // cut short at the end of the file
    for (int k = 1; k <= extra; ++k) {
      const unsigned char cc = s[i + k];
      const unsigned char lo = k == 1 ? low : 0x80;
      const unsigned char hi = k == 1 ? high : 0xBF;
      if (cc < lo || cc > hi) return i;
    }
    i += 1 + extra;
  }
  return -1;
}

std::string read_text(const std::string& path) {
  const bool missing = runtime::path_type(path) == runtime::PathType::kMissing;
  runtime::require_regular_file(path, runtime::FileKind::kData, "text file",
                                missing ? "check the --in paths" : "pass text files only");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(str("text file '", path, "' cannot be opened for reading"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::int64_t bad = first_invalid_utf8(text);
  if (bad >= 0) {
    throw DataError(
        str("text file '", path, "' is not UTF-8 text: invalid byte 0x", std::hex,
            static_cast<int>(static_cast<unsigned char>(text[static_cast<std::size_t>(bad)])),
            std::dec, " at offset ", bad,
            ": pass UTF-8 text files only (e.g. the fortunes files, not their .dat "
            "indexes)"));
  }
  return text;
}

}  // namespace

std::vector<PreparedFile> prepare_text(const std::vector<std::string>& inputs,
                                       const std::string& out_dir, double val_fraction,
                                       const std::string& created_by) {
  if (!(val_fraction > 0 && val_fraction < 1)) {
    throw ConfigError(
        str("--val-fraction ", val_fraction, " must lie strictly between 0 and 1 (e.g. 0.1)"));
  }
  if (inputs.empty()) throw ConfigError("prepare text needs at least one --in FILE");
  std::vector<std::uint16_t> train, val;
  std::string sources;
  for (const std::string& path : inputs) {
    const std::string text = read_text(path);
    const auto size = static_cast<std::int64_t>(text.size());
    // The tail of each file goes to validation, starting at a line break so no line is split.
    auto cut =
        static_cast<std::int64_t>(std::llround(static_cast<double>(size) * (1 - val_fraction)));
    const std::size_t newline = text.find('\n', static_cast<std::size_t>(cut));
    cut = newline == std::string::npos ? size : static_cast<std::int64_t>(newline) + 1;
    for (std::int64_t i = 0; i < size; ++i) {
      (i < cut ? train : val)
          .push_back(static_cast<unsigned char>(text[static_cast<std::size_t>(i)]));
    }
    sources += (sources.empty() ? "" : ", ") + path;
  }
  if (train.size() < 2 || val.size() < 2) {
    throw DataError(str("prepare text: the ", train.size() < 2 ? "training" : "validation",
                        " split would hold ", std::min(train.size(), val.size()),
                        " tokens: give more text or ", train.size() < 2 ? "a smaller" : "a larger",
                        " --val-fraction"));
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    throw DataError(str("output directory '", out_dir, "' cannot be created: ", ec.message()));
  }
  Provenance provenance;
  provenance.source =
      str("UTF-8 text, byte-level tokens (val fraction ", val_fraction, "): ", sources);
  provenance.created_by = created_by;
  std::vector<PreparedFile> out;
  for (auto* split : {&train, &val}) {
    const std::string path = out_dir + (split == &train ? "/train.h5" : "/val.h5");
    write_token_file(path, *split, kByteVocab, "bytes", provenance);
    const auto count = static_cast<std::int64_t>(split->size());
    out.push_back({path, str(count, " byte tokens, vocab_size 256"), count});
  }
  return out;
}

}  // namespace hpctrain::data
