// tiktoken rank files: one "<base64 token> <rank>" a line. The file carries no split pattern or
// special tokens; tiktoken takes them from the encoding's name, and so does hpctrain, from the
// file name (cl100k_base.tiktoken).

#include <filesystem>

#include "bpe_tokenizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "tokenizer_internal.hpp"

namespace hpctrain::data::detail {
namespace {

// tiktoken's published split patterns. GPT-2's is also its encoder.py's.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Encoding {
  const char* name;
  const char* pattern;
  std::map<std::string, std::int64_t> special;
};

const std::vector<Encoding>& encodings() {
  static const std::vector<Encoding> all = {
      {"o200k_base", kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
      {"cl100k_base",
       kCl100kPattern,
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"p50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
      {"r50k_base", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
      {"gpt2", kGpt2Pattern, {{"<|endoftext|>", 50256}}},
  };
  return all;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.empty() || in.size() % 4 != 0) return false;
  std::uint32_t bits = 0;
  int count = 0;
  std::size_t pad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '=') {
      if (i + 2 < in.size()) return false;  // only at the end
      ++pad;
      continue;
    }
    const int v = base64_value(in[i]);
    if (v < 0 || pad > 0) return false;
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    if (++count == 4) {
      out += static_cast<char>(bits >> 16);
      out += static_cast<char>((bits >> 8) & 0xFF);
      out += static_cast<char>(bits & 0xFF);
      bits = 0;
      count = 0;
    }
  }
  if (count == 3) {
    out += static_cast<char>(bits >> 10);
    out += static_cast<char>((bits >> 2) & 0xFF);
  } else if (count == 2) {
    out += static_cast<char>(bits >> 4);
  } else if (count != 0) {
    return false;
  }
  return !out.empty();
}

std::vector<std::string> read_ranks(const std::string& path, const std::string& text) {
  std::vector<std::string> tokens;
  std::string bytes;
  std::size_t line_start = 0;
  for (std::size_t line = 1; line_start < text.size(); ++line) {
    std::size_t end = text.find('\n', line_start);
    if (end == std::string::npos) end = text.size();
    const std::string_view row(text.data() + line_start, end - line_start);
    line_start = end + 1;
    if (row.empty()) continue;
    const std::size_t space = row.find(' ');
    const std::string where = str("tiktoken file '", path, "', line ", line);
    if (space == std::string_view::npos || !base64_decode(row.substr(0, space), bytes)) {
      throw DataError(str(where, ": expected '<base64 token> <rank>', found '",
                          clip(std::string(row), 80), "': use the file as published"));
    }
    const std::string_view number = row.substr(space + 1);
    std::int64_t rank = 0;
    bool ok = !number.empty() && number.size() < 10;
    for (const char c : number) {
      ok = ok && c >= '0' && c <= '9';
      rank = rank * 10 + (c - '0');
    }
    if (!ok) {
      throw DataError(str(where, ": the rank '", clip(std::string(number), 40),
                          "' is not a number below 10^9"));
    }
    if (static_cast<std::size_t>(rank) >= tokens.size()) {
      tokens.resize(static_cast<std::size_t>(rank) + 1);
    }
    if (!tokens[static_cast<std::size_t>(rank)].empty()) {
      throw DataError(str(where, ": rank ", rank, " is given twice"));
    }
    tokens[static_cast<std::size_t>(rank)] = bytes;
  }
  if (tokens.empty()) throw DataError(str("tiktoken file '", path, "' holds no tokens"));
  return tokens;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tiktoken(const std::string& path) {
  const std::string name = std::filesystem::path(path).stem().string();
  const Encoding* encoding = nullptr;
  for (const Encoding& e : encodings()) {
    if (name.find(e.name) != std::string::npos) {
      encoding = &e;
      break;
    }
  }
  if (encoding == nullptr) {
    throw DataError(str("tiktoken file '", path,
                        "': its name does not say which encoding it is, and so which split "
                        "pattern and special tokens it has: name it o200k_base.tiktoken, "
                        "cl100k_base.tiktoken, p50k_base.tiktoken, r50k_base.tiktoken or "
                        "gpt2.tiktoken"));
  }
  const std::string text = read_whole_file(path, "tiktoken file");
  std::vector<std::string> tokens = read_ranks(path, text);
  for (const auto& [text, id] : encoding->special) {
    if (static_cast<std::size_t>(id) < tokens.size() &&
        !tokens[static_cast<std::size_t>(id)].empty()) {
      throw DataError(str(
          "tiktoken file '", path, "': rank ", id, " is ", encoding->name, "'s special token ",
          text, ", but the file gives it to another token: is it really ", encoding->name, "?"));
    }
  }
  const std::string where = str("tiktoken file '", path, "'");
  BpeParts parts;
  parts.identity =
      str("tiktoken:", std::filesystem::path(path).filename().string(), ":", content_hash(text));
  parts.model = std::make_unique<BpeModel>(BpeModel::from_ranks(std::move(tokens), where));
  parts.raw_added = encoding->special;
  parts.patterns.emplace_back(encoding->pattern, where);
  parts.eot_id = find_eot(parts.raw_added);
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace hpctrain::data::detail
