#include "hpctrain/data/multiple_choice.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

std::int64_t label_of(const nlohmann::json& value, const std::string& where) {
  if (value.is_number_integer()) return value.get<std::int64_t>();
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (!s.empty() && s.find_first_not_of("0123456789") == std::string::npos && s.size() < 10) {
      return std::stoll(s);
    }
  }
  throw DataError(str(where, ": field label is ", clip(value.dump(), 40),
                      ": expected the index of the right ending (0, 1, ...)"));
}

}  // namespace

std::vector<ChoiceExample> read_multiple_choice(const std::string& path, const Tokenizer& tokenizer,
                                                const std::string& key) {
  const std::string label = str(key, " file '", clip(path), "'");
  runtime::require_regular_file(path, runtime::FileKind::kData, label,
                                "give a JSON-lines file of examples {ctx, endings, label}");
  std::ifstream in(path);
  if (!in) throw DataError(str(label, " cannot be read: check its permissions"));
  std::vector<ChoiceExample> examples;
  std::string line;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = str(label, " line ", number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(str(where, ": not JSON (", e.what(), "): one object per line"));
    }
    if (!j.is_object()) throw DataError(str(where, ": expected a JSON object per line"));
    if (!j.contains("ctx") || !j["ctx"].is_string()) {
      throw DataError(str(where, ": field ctx (the context, a string) is missing or not a string"));
    }
    if (!j.contains("endings") || !j["endings"].is_array() || j["endings"].size() < 2) {
      throw DataError(
          str(where, ": field endings must be a list of at least two candidate strings"));
    }
    if (!j.contains("label")) throw DataError(str(where, ": field label is missing"));
    ChoiceExample ex;
    ex.context = tokenizer.encode(j["ctx"].get<std::string>());
    if (ex.context.empty()) throw DataError(str(where, ": field ctx has no tokens"));
    for (std::size_t e = 0; e < j["endings"].size(); ++e) {
      const auto& ending = j["endings"][e];
      if (!ending.is_string()) {
        throw DataError(str(where, ": field endings[", e, "] is not a string"));
      }
      ex.endings.push_back(tokenizer.encode(" " + ending.get<std::string>()));
    }
    ex.label = label_of(j["label"], where);
    if (ex.label < 0 || ex.label >= static_cast<std::int64_t>(ex.endings.size())) {
      throw DataError(str(where, ": field label = ", ex.label, " is not an index of the ",
                          ex.endings.size(), " endings"));
    }
    examples.push_back(std::move(ex));
  }
  if (examples.empty()) throw DataError(str(label, " holds no examples"));
  return examples;
}

}  // namespace hpctrain::data
