// load_tokenizer: which kind of tokenizer a spec names, decided from the path's type and file
// names only (stat, never open), so a FIFO or a directory in place of a file is refused before
// anything blocks on it.

#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "tokenizer_internal.hpp"

namespace hpctrain::data {
namespace {

constexpr const char* kSpecHelp =
    "pass bytes, a tokenizer.json (or a folder holding one), a folder holding GPT-2's "
    "encoder.json and vocab.bpe, or a tiktoken rank file such as cl100k_base.tiktoken "
    "(docs/DATA.md, \"Tokenizers\")";

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

std::string tokenizer_file(const std::string& path, const std::string& what) {
  runtime::require_regular_file(path, runtime::FileKind::kData, what, kSpecHelp);
  return path;
}

std::unique_ptr<Tokenizer> load_gpt2_pair(const std::string& dir) {
  const std::string encoder = tokenizer_file(dir + "/encoder.json", "GPT-2 encoder.json");
  const std::string merges = tokenizer_file(dir + "/vocab.bpe", "GPT-2 vocab.bpe");
  return detail::load_gpt2_tokenizer(encoder, merges);
}

std::unique_ptr<Tokenizer> load_from_directory(const std::string& dir) {
  const std::string json = dir + "/tokenizer.json";
  if (runtime::path_type(json) != runtime::PathType::kMissing) {
    return detail::load_hf_tokenizer(tokenizer_file(json, "tokenizer file"));
  }
  const bool encoder = runtime::path_type(dir + "/encoder.json") != runtime::PathType::kMissing;
  const bool merges = runtime::path_type(dir + "/vocab.bpe") != runtime::PathType::kMissing;
  if (encoder || merges) return load_gpt2_pair(dir);
  throw DataError(str("tokenizer folder '", dir,
                      "' holds neither tokenizer.json nor encoder.json + vocab.bpe: ", kSpecHelp));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec) {
  if (spec == "bytes") return detail::make_byte_tokenizer();
  if (spec.empty()) throw DataError(str("the tokenizer is empty: ", kSpecHelp));
  const runtime::PathType type = runtime::path_type(spec);
  if (type == runtime::PathType::kDirectory) return load_from_directory(spec);
  const std::string name = std::filesystem::path(spec).filename().string();
  if (type == runtime::PathType::kMissing) {
    throw DataError(str("tokenizer '", spec, "' does not exist: ", kSpecHelp));
  }
  tokenizer_file(spec, "tokenizer file");
  if (ends_with(name, ".tiktoken")) return detail::load_tiktoken(spec);
  if (name == "encoder.json" || name == "vocab.bpe") {
    return load_gpt2_pair(std::filesystem::path(spec).parent_path().string());
  }
  if (ends_with(name, ".json")) return detail::load_hf_tokenizer(spec);
  throw DataError(
      str("tokenizer file '", spec, "' is of no known kind (by its name): ", kSpecHelp));
}

namespace detail {

std::string read_whole_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DataError(str(what, " '", path, "' cannot be opened for reading"));
  // One read of the whole size: a character iterator takes 20x longer on an 11 MB vocabulary.
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in || in.gcount() != static_cast<std::streamsize>(bytes.size())) {
    throw DataError(str(what, " '", path, "' could not be read to its end"));
  }
  return bytes;
}

std::string content_hash(const std::string& bytes) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return str("xxh64=", hex);
}

}  // namespace detail
}  // namespace hpctrain::data
