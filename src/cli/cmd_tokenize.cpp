// hpctrain tokenize: encode text to token ids, or decode ids to text, with any tokenizer
// prepare text takes, so people can check what their data will look like (docs/DATA.md).

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "command.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer = "bytes";
  std::string text;
  std::string file;
  bool decode = false;
  bool show = false;
};

std::string read_input(const TokenizeOptions& opt) {
  if (opt.text.empty() == opt.file.empty()) {
    throw ConfigError("tokenize needs the input as TEXT or as --file PATH (one of the two)");
  }
  if (opt.file.empty()) return opt.text;
  runtime::require_regular_file(opt.file, runtime::FileKind::kData, "input file",
                                "pass a text file (or the ids, with --decode)");
  std::ifstream in(opt.file, std::ios::binary);
  if (!in) throw DataError(str("input file '", opt.file, "' cannot be opened for reading"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::int64_t> parse_ids(const std::string& text, const std::string& where) {
  std::vector<std::int64_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == ',') {
      ++i;
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
    if (end == i || end - i > 12) {
      throw ConfigError(str(where, ": '", clip(text.substr(i, 20), 20), "' at character ", i,
                            " is not a token id: give ids separated by spaces or commas"));
    }
    ids.push_back(std::stoll(text.substr(i, end - i)));
    i = end;
  }
  return ids;
}

// A token's bytes for a terminal: printable ASCII as is, the rest escaped.
std::string escaped(const std::string& bytes) {
  std::string out;
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += str("\\", ch);
    } else if (c >= 32 && c < 127) {
      out += ch;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

int run_tokenize(CommandContext&, const TokenizeOptions& opt) {
  const auto tokenizer = data::load_tokenizer(opt.tokenizer);
  const std::string input = read_input(opt);
  if (opt.decode) {
    const auto ids = parse_ids(input, opt.file.empty() ? "TEXT" : str("--file ", opt.file));
    std::cout << tokenizer->decode(ids) << std::flush;
    return 0;
  }
  const auto ids = tokenizer->encode(input);
  if (opt.show) {
    for (const std::int64_t id : ids) {
      std::cout << id << "\t\"" << escaped(tokenizer->decode({id})) << "\"\n";
    }
  } else {
    for (std::size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  }
  std::cerr << ids.size() << " tokens for " << input.size() << " bytes (" << tokenizer->identity()
            << ", vocab_size " << tokenizer->vocab_size() << ")\n";
  return 0;
}

const CommandRegistration tokenize_command = command<TokenizeOptions>(
    "tokenize",
    "Encode text to token ids (printed on one line) or decode ids to text, with the tokenizer "
    "prepare text uses",
    [](CLI::App& app, TokenizeOptions& opt) {
      app.add_option("text", opt.text, "The text to encode (or the ids to decode, with --decode)");
      app.add_option("--file", opt.file, "Read the text (or the ids) from this file instead");
      app.add_option("--tokenizer", opt.tokenizer,
                     "bytes, a tokenizer.json (or its folder), a folder with GPT-2's encoder.json "
                     "+ vocab.bpe, or a tiktoken file such as cl100k_base.tiktoken")
          ->capture_default_str();
      app.add_flag("--decode", opt.decode,
                   "Decode: the input is token ids separated by spaces or commas; prints the text");
      app.add_flag("--show", opt.show, "Encode: one token a line, its id and its text");
    },
    run_tokenize, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
