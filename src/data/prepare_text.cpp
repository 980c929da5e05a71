// UTF-8 text files -> token files train.h5 / val.h5, with any tokenizer (tokenizer.hpp), the
// documents' encoding split over the ranks.

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/utf8.hpp"

namespace hpctrain::data {
namespace {

std::string read_text(const std::string& path) {
  const bool missing = runtime::path_type(path) == runtime::PathType::kMissing;
  runtime::require_regular_file(path, runtime::FileKind::kData, "text file",
                                missing ? "check the --in paths" : "pass text files only");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DataError(str("text file '", path, "' cannot be opened for reading"));
  // One read of the size the file has (a regular file, checked above): no growing copies.
  std::string text(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    throw DataError(str("text file '", path, "' could not be read to its end (", text.size(),
                        " bytes): check the file"));
  }
  const std::int64_t bad = runtime::first_invalid_utf8(text);
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

// One stretch of one file that is encoded on its own: a document (doc separator file or
// blank-line) or a file part (none).
struct Unit {
  std::size_t file = 0;
  std::size_t begin = 0, end = 0;
  bool val = false;
};

// The byte where each file's validation tail starts: the line break after the cut.
std::size_t val_cut(const std::string& text, double val_fraction) {
  if (val_fraction <= 0) return text.size();
  const auto cut =
      static_cast<std::size_t>(std::llround(static_cast<double>(text.size()) * (1 - val_fraction)));
  const std::size_t newline = text.find('\n', cut);
  return newline == std::string::npos ? text.size() : newline + 1;
}

bool blank(const std::string& text, std::size_t begin, std::size_t end) {
  for (std::size_t i = begin; i < end; ++i) {
    if (!std::isspace(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

// [begin, end) as documents: whole, or the runs of non-blank lines (each with its line breaks).
void add_units(const std::string& text, std::size_t file, std::size_t begin, std::size_t end,
               bool val, bool paragraphs, std::vector<Unit>& units) {
  if (begin >= end) return;
  if (!paragraphs) {
    units.push_back({file, begin, end, val});
    return;
  }
  std::size_t doc = std::string::npos;
  for (std::size_t line = begin; line < end;) {
    std::size_t next = text.find('\n', line);
    next = next == std::string::npos || next >= end ? end : next + 1;
    if (blank(text, line, next)) {
      if (doc != std::string::npos) units.push_back({file, doc, line, val});
      doc = std::string::npos;
    } else if (doc == std::string::npos) {
      doc = line;
    }
    line = next;
  }
  if (doc != std::string::npos) units.push_back({file, doc, end, val});
}

// Every rank's ids, in rank order, on world rank 0 (empty elsewhere): each rank's share goes
// straight to its place in rank 0's vector (after the encoding agreement: every rank is here).
std::vector<std::uint32_t> gather_ids(comm::ControlPlane& world, std::vector<std::uint32_t> mine) {
  constexpr int kTagIds = 7302;
  const std::vector<std::int64_t> counts = world.all_gather(static_cast<std::int64_t>(mine.size()));
  if (world.rank() != 0) {
    world.send_bytes(0, kTagIds, mine.data(), mine.size() * sizeof(std::uint32_t));
    return {};
  }
  std::size_t total = 0;
  for (const std::int64_t c : counts) total += static_cast<std::size_t>(c);
  std::vector<std::uint32_t> out = std::move(mine);
  std::size_t at = out.size();
  out.resize(total);
  for (int r = 1; r < world.size(); ++r) {
    const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
    world.recv_bytes(r, kTagIds, out.data() + at, n * sizeof(std::uint32_t));
    at += n;
  }
  return out;
}

// Waits until every rank has encoded its share, without the collective watchdog (shares take
// different times: a large share must not look like a hang), and agrees on the lowest rank's
// problem: "" when every rank succeeded. Each rank reports to rank 0, which answers all.
std::string agree_when_encoded(comm::ControlPlane& world, const std::string& problem) {
  constexpr int kTagEncoded = 7301;
  std::string first = problem;
  if (world.rank() == 0) {
    for (int r = 1; r < world.size(); ++r) {
      const std::string theirs = world.recv_text(r, kTagEncoded);
      if (first.empty() && !theirs.empty()) first = str(theirs, " (rank ", r, ")");
    }
  } else {
    world.send_text(0, kTagEncoded, problem);
  }
  return world.broadcast_idle(first);
}

void check_options(const TextPrepareOptions& o) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    throw ConfigError(str("--val-fraction ", o.val_fraction,
                          " must lie in [0, 1) (e.g. 0.1; 0 writes train.h5 alone)"));
  }
  if (o.inputs.empty()) throw ConfigError("prepare text needs at least one --in FILE");
  if (!o.doc_separator.empty() && o.doc_separator != "file" && o.doc_separator != "blank-line" &&
      o.doc_separator != "none") {
    throw ConfigError(str("--doc-separator ", o.doc_separator, ": use file, blank-line or none"));
  }
}

void write_text_split(const std::string& path, const std::vector<std::uint32_t>& ids,
                      const Tokenizer& tokenizer, const Provenance& provenance) {
  if (tokenizer.vocab_size() <= 65536) {
    write_token_file(path, std::vector<std::uint16_t>(ids.begin(), ids.end()),
                     tokenizer.vocab_size(), tokenizer.identity(), provenance);
  } else {
    write_token_file(path, ids, tokenizer.vocab_size(), tokenizer.identity(), provenance);
  }
}

}  // namespace

std::vector<PreparedFile> prepare_text(const TextPrepareOptions& options,
                                       comm::ControlPlane* world) {
  check_options(options);
  const auto tokenizer = load_tokenizer(options.tokenizer);
  std::string separator = options.doc_separator;
  if (separator.empty()) separator = tokenizer->eot_id() ? "file" : "none";
  if (separator != "none" && !tokenizer->eot_id()) {
    throw ConfigError(str("--doc-separator ", separator, ": the tokenizer ", tokenizer->identity(),
                          " has no end-of-text token to put between documents: use "
                          "--doc-separator none"));
  }
  std::vector<std::string> texts;
  std::vector<Unit> units, val_units;
  std::string sources;
  for (std::size_t f = 0; f < options.inputs.size(); ++f) {
    texts.push_back(read_text(options.inputs[f]));
    const std::string& text = texts.back();
    const std::size_t cut = val_cut(text, options.val_fraction);
    add_units(text, f, 0, cut, false, separator == "blank-line", units);
    add_units(text, f, cut, text.size(), true, separator == "blank-line", val_units);
    sources += (sources.empty() ? "" : ", ") + options.inputs[f];
  }
  const std::size_t train_units = units.size();
  units.insert(units.end(), val_units.begin(), val_units.end());

  // This rank's share: the units whose first byte lies in its slice of all the bytes.
  const int rank = world ? world->rank() : 0, ranks = world ? world->size() : 1;
  std::size_t total = 0;
  for (const Unit& u : units) total += u.end - u.begin;
  std::vector<std::uint32_t> mine_train, mine_val;
  std::string problem;
  try {
    std::size_t at = 0;
    for (const Unit& u : units) {
      const std::size_t owner = total == 0 ? 0 : at * static_cast<std::size_t>(ranks) / total;
      at += u.end - u.begin;
      if (static_cast<int>(owner) != rank) continue;
      auto& into = u.val ? mine_val : mine_train;
      for (const std::int64_t id :
           tokenizer->encode(std::string_view(texts[u.file]).substr(u.begin, u.end - u.begin))) {
        into.push_back(static_cast<std::uint32_t>(id));
      }
      if (separator != "none") into.push_back(static_cast<std::uint32_t>(*tokenizer->eot_id()));
    }
  } catch (const Error& e) {
    if (!world) throw;
    problem = e.what();
  }
  std::vector<std::uint32_t> train = std::move(mine_train), val = std::move(mine_val);
  if (world && world->size() > 1) {
    const std::string first = agree_when_encoded(*world, problem);
    if (!first.empty()) throw DataError(first);
    train = gather_ids(*world, std::move(train));
    val = gather_ids(*world, std::move(val));
    if (world->rank() != 0) return {};
  }
  const bool with_val = options.val_fraction > 0;
  if (train.size() < 2 || (with_val && val.size() < 2)) {
    const bool t = train.size() < 2;
    throw DataError(str("prepare text: the ", t ? "training" : "validation", " split would hold ",
                        t ? train.size() : val.size(), " tokens: give more text or ",
                        t ? "a smaller" : "a larger", " --val-fraction"));
  }
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) {
    throw DataError(
        str("output directory '", options.out_dir, "' cannot be created: ", ec.message()));
  }
  Provenance provenance;
  const bool bytes = tokenizer->identity() == "bytes";
  provenance.source = str("UTF-8 text, ", bytes ? "byte-level tokens" : tokenizer->identity(),
                          " (val fraction ", options.val_fraction, ", doc separator ", separator,
                          ", ", units.size(), " documents): ", sources);
  provenance.created_by = options.created_by;
  std::vector<PreparedFile> out;
  for (const auto* split : {&train, &val}) {
    if (split == &val && !with_val) break;
    const std::string path = options.out_dir + (split == &train ? "/train.h5" : "/val.h5");
    write_text_split(path, *split, *tokenizer, provenance);
    const auto count = static_cast<std::int64_t>(split->size());
    const std::size_t docs = split == &train ? train_units : units.size() - train_units;
    out.push_back({path,
                   bytes ? str(count, " byte tokens, vocab_size 256")
                         : str(count, " tokens, vocab_size ", tokenizer->vocab_size(), ", ", docs,
                               " documents"),
                   count});
  }
  return out;
}

std::vector<PreparedFile> prepare_text(const std::vector<std::string>& inputs,
                                       const std::string& out_dir, double val_fraction,
                                       const std::string& created_by) {
  TextPrepareOptions options;
  options.inputs = inputs;
  options.out_dir = out_dir;
  options.val_fraction = val_fraction;
  options.created_by = created_by;
  return prepare_text(options, nullptr);
}

}  // namespace hpctrain::data
