// Byte-level BPE from JSON files: a Hugging Face tokenizer.json, and GPT-2's encoder.json with
// vocab.bpe. Tokens in these files are byte-level strings (byte_level.hpp); they become raw bytes
// here. Every field is checked, and an error names the file and the field.

#include <filesystem>
#include <nlohmann/json.hpp>

#include "bpe_tokenizer.hpp"
#include "byte_level.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "tokenizer_internal.hpp"

namespace hpctrain::data::detail {
namespace {

using nlohmann::json;

// Hugging Face's ByteLevel pre-tokenizer pattern (use_regex: true), GPT-2's.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Errors name the file and the field: "tokenizer file 'x/tokenizer.json', field model.merges[3]".
struct Where {
  std::string file;
  std::string operator()(const std::string& field) const { return str(file, ", field ", field); }
};

json parse_json(const std::string& text, const std::string& path, const std::string& what) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw DataError(str(what, " '", path, "' is not valid JSON (byte ", e.byte, "): ", e.what()));
  }
}

const json& member(const json& object, const char* key, const Where& where,
                   const std::string& field) {
  if (!object.is_object() || !object.contains(key)) {
    throw DataError(str(where(field.empty() ? key : field + "." + key), " is missing"));
  }
  return object.at(key);
}

std::string as_string(const json& value, const std::string& where) {
  if (!value.is_string())
    throw DataError(str(where, " should be a string, found ", value.type_name()));
  return value.get<std::string>();
}

std::string token_bytes(const std::string& token, const std::string& where) {
  auto bytes = byte_level_decode(token);
  if (!bytes || bytes->empty()) {
    throw DataError(str(where, ": the token '", clip(token, 60),
                        "' holds a character outside the byte-level alphabet: hpctrain reads "
                        "byte-level BPE vocabularies only (GPT-2, Qwen, Llama 3 style)"));
  }
  return *bytes;
}

// vocab {"token": id} -> tokens[id] = raw bytes. `skip`: ids whose token need not be byte-level
// (added tokens that the vocabulary repeats).
std::vector<std::string> read_vocab(const json& vocab, const std::string& where,
                                    const std::map<std::string, std::int64_t>& skip) {
  if (!vocab.is_object() || vocab.empty()) {
    throw DataError(str(where, " should be a non-empty object {\"token\": id}"));
  }
  std::vector<std::string> tokens;
  for (const auto& [token, id_value] : vocab.items()) {
    if (!id_value.is_number_integer() || id_value.get<std::int64_t>() < 0 ||
        id_value.get<std::int64_t>() >= (std::int64_t{1} << 31)) {
      throw DataError(str(where, "[\"", clip(token, 60), "\"] should be an id in [0, 2^31)"));
    }
    const auto id = static_cast<std::size_t>(id_value.get<std::int64_t>());
    const auto added = skip.find(token);
    if (added != skip.end() && added->second == static_cast<std::int64_t>(id)) {
      if (!byte_level_decode(token)) continue;  // an added token, found by its text
    }
    if (id >= tokens.size()) tokens.resize(id + 1);
    if (!tokens[id].empty()) {
      throw DataError(str(where, ": id ", id, " is given to two tokens"));
    }
    tokens[id] = token_bytes(token, str(where, "[\"", clip(token, 60), "\"]"));
  }
  return tokens;
}

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& where) {
  const std::size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string::npos) {
    throw DataError(str(where, " is '", clip(line, 60), "': expected two tokens and one space"));
  }
  return {token_bytes(line.substr(0, space), where), token_bytes(line.substr(space + 1), where)};
}

std::vector<std::pair<std::string, std::string>> read_merges(const json& merges,
                                                             const std::string& where) {
  if (!merges.is_array()) throw DataError(str(where, " should be a list"));
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string at = str(where, "[", i, "]");
    const json& m = merges[i];
    if (m.is_string()) {
      out.push_back(split_merge(m.get<std::string>(), at));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(token_bytes(m[0].get<std::string>(), at),
                       token_bytes(m[1].get<std::string>(), at));
    } else {
      throw DataError(str(at, " should be \"a b\" or [\"a\", \"b\"]"));
    }
  }
  return out;
}

// Hugging Face's pattern {"String": "x"} is literal text: escape it for PCRE2.
std::string literal_pattern(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

// The pre_tokenizer: Split steps become split patterns in order; ByteLevel (use_regex) adds
// GPT-2's pattern; Sequence nests. Returns whether a ByteLevel step was seen.
bool read_pre_tokenizer(const json& pre, const std::string& field, const Where& where,
                        BpeParts& parts) {
  if (pre.is_null()) return false;
  const std::string type = as_string(member(pre, "type", where, field), where(field + ".type"));
  if (type == "Sequence") {
    const json& steps = member(pre, "pretokenizers", where, field);
    if (!steps.is_array())
      throw DataError(str(where(field + ".pretokenizers"), " should be a list"));
    bool byte_level = false;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      byte_level |=
          read_pre_tokenizer(steps[i], str(field, ".pretokenizers[", i, "]"), where, parts);
    }
    return byte_level;
  }
  if (type == "ByteLevel") {
    if (pre.value("use_regex", true)) parts.patterns.emplace_back(kByteLevelPattern, where.file);
    parts.add_prefix_space = pre.value("add_prefix_space", true);
    return true;
  }
  if (type == "Split") {
    const json& pattern = member(pre, "pattern", where, field);
    std::string regex;
    if (pattern.contains("Regex")) {
      regex = as_string(pattern.at("Regex"), where(field + ".pattern.Regex"));
    } else if (pattern.contains("String")) {
      regex = literal_pattern(as_string(pattern.at("String"), where(field + ".pattern.String")));
    } else {
      throw DataError(str(where(field + ".pattern"), " should hold Regex or String"));
    }
    const std::string behavior = pre.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated" || pre.value("invert", false)) {
      throw DataError(str(where(field), ": Split with behavior '", behavior, "'",
                          pre.value("invert", false) ? " and invert" : "",
                          " is not supported (hpctrain splits as Isolated, not inverted)"));
    }
    parts.patterns.emplace_back(regex, where(field + ".pattern"));
    return false;
  }
  throw DataError(str(where(field + ".type"), " is '", type,
                      "': hpctrain's tokenizers know the pre-tokenizers ByteLevel, Split and "
                      "Sequence (byte-level BPE: GPT-2, Qwen, Llama 3 style)"));
}

std::vector<NormalForm> read_normalizer(const json& norm, const std::string& field,
                                        const Where& where) {
  if (norm.is_null()) return {};
  const std::string type = as_string(member(norm, "type", where, field), where(field + ".type"));
  if (type != "Sequence") return {normal_form(type, where(field + ".type"))};
  const json& steps = member(norm, "normalizers", where, field);
  if (!steps.is_array()) throw DataError(str(where(field + ".normalizers"), " should be a list"));
  std::vector<NormalForm> forms;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    for (NormalForm f : read_normalizer(steps[i], str(field, ".normalizers[", i, "]"), where)) {
      forms.push_back(f);
    }
  }
  return forms;
}

void read_added_tokens(const json& added, const Where& where, BpeParts& parts) {
  if (added.is_null()) return;
  if (!added.is_array()) throw DataError(str(where("added_tokens"), " should be a list"));
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string field = str("added_tokens[", i, "]");
    const json& t = added[i];
    const json& id = member(t, "id", where, field);
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0) {
      throw DataError(str(where(field + ".id"), " should be a non-negative integer"));
    }
    const std::string content =
        as_string(member(t, "content", where, field), where(field + ".content"));
    if (content.empty()) throw DataError(str(where(field + ".content"), " is empty"));
    for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
      if (t.value(flag, false)) {
        throw DataError(str(where(field + "." + flag),
                            " is true: hpctrain matches added tokens "
                            "exactly (single_word, lstrip and rstrip are not supported)"));
      }
    }
    const bool special = t.value("special", false);
    auto& into = t.value("normalized", !special) ? parts.normalized_added : parts.raw_added;
    into[content] = id.get<std::int64_t>();
  }
}

void check_model_options(const json& model, const Where& where) {
  if (model.contains("type") && model.at("type") != "BPE") {
    throw DataError(str(where("model.type"), " is ", model.at("type").dump(),
                        ": hpctrain reads byte-level BPE tokenizers only"));
  }
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout") != 0) {
    throw DataError(str(where("model.dropout"), " is ", model.at("dropout").dump(),
                        ": BPE dropout is for training a tokenizer; set it to null"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "") {
      throw DataError(str(where(str("model.", key)), " is ", model.at(key).dump(),
                          ": not supported by hpctrain's byte-level BPE"));
    }
  }
  if (model.value("byte_fallback", false)) {
    throw DataError(str(where("model.byte_fallback"),
                        " is true: a SentencePiece-style vocabulary, not byte-level BPE"));
  }
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path) {
  const std::string text = read_whole_file(json_path, "tokenizer file");
  const json file = parse_json(text, json_path, "tokenizer file");
  const Where where{str("tokenizer file '", json_path, "'")};
  if (!file.is_object()) throw DataError(str(where.file, " should hold a JSON object"));
  const std::string top_level;  // the file's own keys: no enclosing field
  const json& model = member(file, "model", where, top_level);
  check_model_options(model, where);
  BpeParts parts;
  read_added_tokens(file.value("added_tokens", json()), where, parts);
  std::map<std::string, std::int64_t> all_added = parts.raw_added;
  all_added.insert(parts.normalized_added.begin(), parts.normalized_added.end());
  std::vector<std::string> tokens =
      read_vocab(member(model, "vocab", where, "model"), where("model.vocab"), all_added);
  const auto merges = read_merges(member(model, "merges", where, "model"), where("model.merges"));
  const bool byte_level =
      read_pre_tokenizer(file.value("pre_tokenizer", json()), "pre_tokenizer", where, parts);
  if (!byte_level) {
    throw DataError(str(where("pre_tokenizer"),
                        " has no ByteLevel step: hpctrain reads byte-level BPE tokenizers only "
                        "(GPT-2, Qwen, Llama 3 style), not SentencePiece-style vocabularies"));
  }
  parts.normalizer =
      UnicodeNormalizer(read_normalizer(file.value("normalizer", json()), "normalizer", where));
  parts.model = std::make_unique<BpeModel>(BpeModel::from_merges(
      std::move(tokens), merges, model.value("ignore_merges", false), where.file));
  parts.eot_id = find_eot(all_added);
  parts.identity =
      str("hf-bpe:", std::filesystem::path(json_path).filename().string(), ":", content_hash(text));
  return make_bpe_tokenizer(std::move(parts));
}

std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_path,
                                               const std::string& merges_path) {
  const std::string encoder_text = read_whole_file(encoder_path, "GPT-2 encoder.json");
  const json encoder = parse_json(encoder_text, encoder_path, "GPT-2 encoder.json");
  std::vector<std::string> tokens =
      read_vocab(encoder, str("GPT-2 encoder.json '", encoder_path, "'"), {});
  const std::string text = read_whole_file(merges_path, "GPT-2 vocab.bpe");
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t start = 0;
  for (std::size_t line = 1; start < text.size(); ++line) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(start, end - start);
    start = end + 1;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.empty() || (line == 1 && row.rfind("#version", 0) == 0)) continue;
    merges.push_back(split_merge(row, str("GPT-2 vocab.bpe '", merges_path, "', line ", line)));
  }
  BpeParts parts;
  const std::string where = str("GPT-2 files '", encoder_path, "' and '", merges_path, "'");
  parts.model = std::make_unique<BpeModel>(
      BpeModel::from_merges(std::move(tokens), merges, /*whole_pieces_first=*/false, where));
  if (auto eot = parts.model->find("<|endoftext|>")) parts.raw_added["<|endoftext|>"] = *eot;
  parts.eot_id = find_eot(parts.raw_added);
  parts.patterns.emplace_back(kByteLevelPattern, where);
  parts.identity = str("gpt2-bpe:encoder.json+vocab.bpe:", content_hash(encoder_text + text));
  return make_bpe_tokenizer(std::move(parts));
}

}  // namespace hpctrain::data::detail
