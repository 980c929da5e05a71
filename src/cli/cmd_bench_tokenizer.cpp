// hpctrain bench tokenizer: encoding throughput of one tokenizer on one core (MB/s of UTF-8 text,
// tokens/s), documents encoded one by one as prepare text does. scripts/bench_tokenizer.sh runs it
// next to Hugging Face's tokenizers and js-tiktoken on the very same documents, comparing the ids
// it writes (--ids-out) with theirs.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"

namespace hpctrain::cli {
namespace {

struct BenchTokenizerOptions {
  std::string tokenizer = "bytes";
  std::string text;
  std::string docs;
  int rounds = 3;
  std::string ids_out;
  std::string decoded_out;
  bool json = false;
};

std::string read_file(const std::string& path, const std::string& what) {
  runtime::require_regular_file(path, runtime::FileKind::kData, what, "");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(str(what, " '", path, "' cannot be opened for reading"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The documents: the byte lengths in --docs (one a line) cut the text; without it, one document.
std::vector<std::string_view> documents(const std::string& text, const std::string& docs_path) {
  if (docs_path.empty()) return {text};
  std::vector<std::string_view> docs;
  std::istringstream lengths(read_file(docs_path, "document lengths file"));
  std::size_t offset = 0, n = 0;
  while (lengths >> n) {
    if (offset + n > text.size()) {
      throw DataError(str("document lengths file '", docs_path,
                          "': the lengths add up to more "
                          "than the text's ",
                          text.size(), " bytes"));
    }
    docs.push_back(std::string_view(text).substr(offset, n));
    offset += n;
  }
  if (offset != text.size()) {
    throw DataError(str("document lengths file '", docs_path, "': the lengths add up to ", offset,
                        " bytes, the text holds ", text.size()));
  }
  return docs;
}

int run_bench_tokenizer(CommandContext&, const BenchTokenizerOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const auto load_start = Clock::now();
  const auto tokenizer = data::load_tokenizer(opt.tokenizer);
  const double load_s = std::chrono::duration<double>(Clock::now() - load_start).count();
  const std::string text = read_file(opt.text, "text file");
  const auto docs = documents(text, opt.docs);

  std::vector<std::int64_t> ids;
  double best = 0;
  for (int round = 0; round < opt.rounds; ++round) {
    ids.clear();
    const auto start = Clock::now();
    for (const std::string_view doc : docs) {
      const auto doc_ids = tokenizer->encode(doc);
      ids.insert(ids.end(), doc_ids.begin(), doc_ids.end());
    }
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = round == 0 ? s : std::min(best, s);
  }
  const std::string decoded = tokenizer->decode(ids);
  if (!opt.ids_out.empty()) {
    std::vector<std::uint32_t> out(ids.begin(), ids.end());
    std::ofstream(opt.ids_out, std::ios::binary)
        .write(reinterpret_cast<const char*>(out.data()),
               static_cast<std::streamsize>(out.size() * 4));
  }
  if (!opt.decoded_out.empty()) std::ofstream(opt.decoded_out, std::ios::binary) << decoded;

  nlohmann::ordered_json j;
  j["tokenizer"] = tokenizer->identity();
  j["bytes"] = text.size();
  j["documents"] = docs.size();
  j["tokens"] = ids.size();
  j["load_seconds"] = load_s;
  j["encode_seconds"] = best;
  j["mb_per_s"] = static_cast<double>(text.size()) / best / 1e6;
  j["tokens_per_s"] = static_cast<double>(ids.size()) / best;
  j["decode_equals_text"] = decoded == text;
  if (opt.json) {
    print_json(j, false);
    return 0;
  }
  Table table;
  table.section(
      str("tokenizer: ", tokenizer->identity(), " (one core, best of ", opt.rounds, " rounds)"));
  table.row("text", static_cast<double>(text.size()) / 1e6, "MB",
            str("(", docs.size(), " documents)"));
  table.row("tokens", static_cast<double>(ids.size()), "");
  table.row("load", load_s, "s");
  table.row("encode", best, "s");
  table.row("throughput", static_cast<double>(text.size()) / best / 1e6, "MB/s");
  table.row("throughput", static_cast<double>(ids.size()) / best, "tokens/s");
  table.text("decode(encode(text)) == text", decoded == text ? "yes" : "no (normalized)");
  table.print(std::cout);
  return 0;
}

const CommandRegistration bench_tokenizer_command = command<BenchTokenizerOptions>(
    "bench tokenizer", "Tokenizer encoding throughput on one core (MB/s, tokens/s)",
    [](CLI::App& app, BenchTokenizerOptions& opt) {
      app.add_option("--tokenizer", opt.tokenizer,
                     "bytes, a tokenizer.json (or its folder), a folder with GPT-2's encoder.json "
                     "+ vocab.bpe, or a tiktoken file")
          ->capture_default_str();
      app.add_option("--text", opt.text, "UTF-8 text file to encode")->required();
      app.add_option("--docs", opt.docs,
                     "Byte lengths of the documents the text is cut into, one a line (default: "
                     "one document)");
      app.add_option("--rounds", opt.rounds, "Timed passes; the best counts")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--ids-out", opt.ids_out, "Write the ids, uint32 little-endian");
      app.add_option("--decoded-out", opt.decoded_out, "Write decode(ids)");
      app.add_flag("--json", opt.json, "One JSON line instead of the table");
    },
    run_bench_tokenizer, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
