#include "hpctrain/runtime/config.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/utf8.hpp"

namespace hpctrain {
namespace {

// Marks, among the known keys, a key whose value was read as a whole (a map or list): its leaves
// are not unknown keys. No key contains a space.
constexpr const char* kReadWhole = " (read whole)";

bool is_whole_marker(const std::string& key) {
  return key.find(' ') != std::string::npos;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

void collect_leaves(const YAML::Node& node, const std::string& prefix,
                    std::vector<std::string>& out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      std::string key = kv.first.as<std::string>();
      collect_leaves(kv.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (!prefix.empty()) {
    out.push_back(prefix);
  }
}

std::string describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + clip(node.Scalar()) + "'";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "null";
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, bool>) return "true or false";
  if constexpr (std::is_integral_v<T>) return "an integer";
  if constexpr (std::is_floating_point_v<T>) return "a number";
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  return "a list";
}

// Rejects a map that holds a key twice, anywhere in the tree. yaml-cpp keeps both entries and
// lookups find the first, while PyYAML and the resolved config.yaml readers take the last: the
// run would use one value and its record show another.
void check_duplicate_keys(const YAML::Node& node, const std::string& prefix,
                          const std::string& origin, int depth = 0) {
  // An alias inside its own anchor (`tp: &a [*a]`) makes the tree a cycle that every later walk
  // (this one, the emitter of the resolved config) would follow forever.
  constexpr int kMaxDepth = 32;
  if (depth > kMaxDepth) {
    throw ConfigError(str(origin, ": '", clip(prefix), "' nests deeper than ", kMaxDepth,
                          " levels (an alias inside its own anchor?): a config is a few levels "
                          "of sections and keys"));
  }
  if (node.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) continue;
      const std::string key = kv.first.Scalar();
      const std::string full = prefix.empty() ? key : prefix + "." + key;
      const int line = kv.first.Mark().line + 1;
      const auto [it, inserted] = first_line.emplace(key, line);
      if (!inserted) {
        throw ConfigError(str(origin, ": ", kv.second.IsMap() ? "section" : "key", " '", clip(full),
                              "' is given twice, at line ", it->second, " and at line ", line,
                              ": keep one (YAML readers disagree on which one counts)"));
      }
      check_duplicate_keys(kv.second, full, origin, depth + 1);
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) check_duplicate_keys(item, prefix, origin, depth + 1);
  }
}

// Marks every list and map in `node` as flow style (emitted on one line).
void set_flow_style(YAML::Node node) {
  if (!node.IsSequence() && !node.IsMap()) return;
  node.SetStyle(YAML::EmitterStyle::Flow);
  if (node.IsSequence()) {
    for (YAML::Node item : node) set_flow_style(item);
  } else {
    for (auto kv : node) set_flow_style(kv.second);
  }
}

}  // namespace

Config::Config()
    : root_(YAML::NodeType::Map),
      origin_("<defaults>"),
      known_(std::make_shared<std::set<std::string>>()) {}

Config Config::parse(const std::string& text, const std::string& origin) {
  Config config;
  config.origin_ = origin;
  if (const std::int64_t bad = runtime::first_invalid_utf8(text); bad >= 0) {
    const auto line =
        std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad), '\n') + 1;
    throw ConfigError(str(origin, ": byte 0x", std::hex,
                          +static_cast<unsigned char>(text[static_cast<std::size_t>(bad)]),
                          std::dec, " at line ", line,
                          " is not UTF-8: a config is UTF-8 text; re-save it as UTF-8"));
  }
  try {
    YAML::Node node = YAML::Load(text);
    if (node.IsNull()) node = YAML::Node(YAML::NodeType::Map);
    if (!node.IsMap()) throw ConfigError(str(origin, ": the top level must be a map of sections"));
    check_duplicate_keys(node, "", origin);
    config.root_ = node;
  } catch (const YAML::Exception& e) {
    throw ConfigError(str(origin, ": YAML syntax error at line ", e.mark.line + 1, ", column ",
                          e.mark.column + 1, ": ", e.msg));
  }
  return config;
}

Config Config::load(const std::string& path) {
  // Opening a FIFO would block until something writes to it.
  runtime::require_regular_file_if_present(path, runtime::FileKind::kConfig, "config file",
                                           "pass a YAML file (configs/ holds the shipped configs)");
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(str("config file '", path,
                          "' cannot be opened: check the path (configs/ "
                          "holds the shipped configs)"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

void Config::set(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(str("override '", clip(assignment),
                          "' must look like section.key=value, e.g. "
                          "--set optim.lr=3e-4"));
  }
  std::string key = assignment.substr(0, eq);
  std::string value = assignment.substr(eq + 1);
  std::vector<std::string> parts;
  std::stringstream split(key);
  for (std::string part; std::getline(split, part, '.');) {
    if (part.empty())
      throw ConfigError(str("override '", clip(assignment), "': empty key component"));
    parts.push_back(part);
  }
  if (parts.size() < 2) {
    throw ConfigError(str("override '", clip(assignment), "' needs a section, e.g. optim.lr=3e-4"));
  }
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception&) {
    parsed = YAML::Node(value);
  }
  // yaml-cpp's operator[] on a temporary chain would not attach; walk with explicit copies.
  std::vector<YAML::Node> chain{root_};
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    } else if (!next.IsMap()) {
      throw ConfigError(
          str("override '", clip(assignment), "': '", clip(parts[i]), "' is not a section"));
    }
    chain.push_back(next);
  }
  chain.back()[parts.back()] = parsed;
}

ConfigSection Config::section(const std::string& name) {
  YAML::Node node = root_[name];
  if (!node.IsDefined() || node.IsNull()) {
    root_[name] = YAML::Node(YAML::NodeType::Map);
    node = root_[name];
  } else if (!node.IsMap()) {
    throw ConfigError(
        str(origin_, ": section '", name, "' must be a map of keys, found ", describe(node)));
  }
  known_->insert(name);
  return ConfigSection(node, name, known_);
}

void Config::check_unknown_keys() const {
  // Tests list every key the parsers read (tests/e2e/runtime/docs_examples_test.sh checks each is
  // documented): HPCTRAIN_CONFIG_KEYS names a file the known keys are appended to.
  if (const char* keys_file = std::getenv("HPCTRAIN_CONFIG_KEYS"); keys_file && *keys_file) {
    std::ofstream out(keys_file, std::ios::app);
    for (const auto& key : *known_) {
      if (!is_whole_marker(key)) out << key << "\n";
    }
  }
  std::vector<std::string> leaves;
  collect_leaves(root_, "", leaves);
  std::vector<std::string> problems;
  // A value read as a whole (get_text_or_list of a map: data.train = {path, format}) covers the
  // leaves below it: its reader checks their names. A section read key by key covers none.
  const auto covered = [this](const std::string& leaf) {
    for (std::size_t dot = leaf.find('.'); dot != std::string::npos;
         dot = leaf.find('.', dot + 1)) {
      if (known_->count(leaf.substr(0, dot) + kReadWhole)) return true;
    }
    return known_->count(leaf) > 0;
  };
  for (const auto& leaf : leaves) {
    if (covered(leaf)) continue;
    std::string best;
    std::size_t best_distance = 4;
    for (const auto& known : *known_) {
      if (is_whole_marker(known)) continue;
      std::size_t d = edit_distance(leaf, known);
      if (d < best_distance) {
        best_distance = d;
        best = known;
      }
    }
    problems.push_back(str("unknown key '", clip(leaf), "'",
                           best.empty() ? std::string() : str(" (did you mean '", best, "'?)")));
  }
  if (!problems.empty()) {
    std::string message = str(origin_, ": ");
    for (std::size_t i = 0; i < problems.size(); ++i) message += (i ? "; " : "") + problems[i];
    throw ConfigError(message + ". docs/CONFIG.md lists every key.");
  }
}

std::string Config::dump() const {
  YAML::Emitter out;
  out << root_;
  return std::string(out.c_str()) + "\n";
}

ConfigSection::ConfigSection(YAML::Node node, std::string path,
                             std::shared_ptr<std::set<std::string>> known)
    : node_(node), path_(std::move(path)), known_(std::move(known)) {}

std::string ConfigSection::full_key(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void ConfigSection::fail(const std::string& key, const std::string& why) const {
  YAML::Node value = node_[key];
  std::string shown = value.IsDefined() && !value.IsNull() ? describe(value) : "(unset)";
  throw ConfigError(str(full_key(key), " = ", shown, ": ", why));
}

void ConfigSection::check_choice(const std::string& key, const std::string& value,
                                 const std::vector<std::string>& choices) const {
  if (std::find(choices.begin(), choices.end(), value) != choices.end()) return;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  fail(key, str("must be one of ", list));
}

bool ConfigSection::has(const std::string& key) {
  known_->insert(full_key(key));
  YAML::Node value = node_[key];
  return value.IsDefined() && !value.IsNull();
}

ConfigSection ConfigSection::section(const std::string& key) {
  known_->insert(full_key(key));
  YAML::Node node = node_[key];
  if (!node.IsDefined() || node.IsNull()) {
    node_[key] = YAML::Node(YAML::NodeType::Map);
    node = node_[key];
  } else if (!node.IsMap()) {
    fail(key, "must be a map of keys");
  }
  return ConfigSection(node, full_key(key), known_);
}

std::string ConfigSection::get_text_or_list(const std::string& key, const std::string& fallback) {
  YAML::Node value = node_[key];
  if (value.IsDefined() && (value.IsSequence() || value.IsMap())) {
    known_->insert(full_key(key));
    known_->insert(full_key(key) + kReadWhole);  // its fields are the reader's to check
    // A list written as a block (`- a.h5` lines, as docs/DATA.md shows a mixture) keeps its
    // block style in the node, and the emitter follows the node's style over YAML::Flow: the
    // text would be "- a.h5\n- b.h5", a single path. A flow copy emits as one line.
    YAML::Node flow = YAML::Clone(value);
    set_flow_style(flow);
    YAML::Emitter out;
    out.SetStringFormat(YAML::DoubleQuoted);  // a glob's [0-4] would end a plain flow scalar
    out << YAML::Flow << flow;
    return out.c_str();
  }
  return get<std::string>(key, fallback);
}

template <typename T>
T ConfigSection::get(const std::string& key, const T& fallback) {
  known_->insert(full_key(key));
  YAML::Node value = node_[key];
  constexpr bool kNumber = std::is_arithmetic_v<T>;  // bool, integers, floating point
  if (value.IsDefined() && value.IsNull() && kNumber) {
    // `eval.batch_size: ~` (or an empty value) is a mistake, not "the default": say so.
    throw ConfigError(str(full_key(key), " = null: expected ", type_name<T>(),
                          " (remove the key to use the default)"));
  }
  if (!value.IsDefined() || value.IsNull()) {
    node_[key] = fallback;  // the resolved config shows every default in effect
    return fallback;
  }
  try {
    if constexpr (kNumber) {
      // An explicit YAML tag of another type (`!!float 3`, `!!str 3`) is that type, whatever its
      // text: an integer key given a float, even a whole one, is refused. "?" (a plain scalar) and
      // "!" (a quoted one) carry no type of their own.
      const std::string& tag = value.Tag();
      const bool plain = tag.empty() || tag == "?" || tag == "!";
      const bool integer_tag = tag == "tag:yaml.org,2002:int";
      const bool float_tag = tag == "tag:yaml.org,2002:float";
      const bool bool_tag = tag == "tag:yaml.org,2002:bool";
      const bool ok = plain || (std::is_same_v<T, bool>       ? bool_tag
                                : std::is_floating_point_v<T> ? integer_tag || float_tag
                                                              : integer_tag);
      if (!ok) {
        const std::string core = "tag:yaml.org,2002:";
        const std::string shown = tag.rfind(core, 0) == 0 ? "!!" + tag.substr(core.size()) : tag;
        throw ConfigError(str(full_key(key), " = ", clip(shown), " ", describe(value),
                              ": expected ", type_name<T>(), " (drop the ", clip(shown),
                              " tag, or give ", type_name<T>(), ")"));
      }
    }
    if constexpr (std::is_same_v<T, bool>) {
      // yaml-cpp accepts y/n/on/off too; insist on true/false so typos do not slip through.
      const std::string& s = value.Scalar();
      if (!value.IsScalar() || (s != "true" && s != "false")) throw YAML::Exception({}, "bool");
    }
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      // "3.5" must not silently become 3.
      if (value.IsScalar() && value.Scalar().find_first_of(".eE") != std::string::npos) {
        throw YAML::Exception({}, "int");
      }
    }
    return value.as<T>();
  } catch (const YAML::Exception&) {
    fail(key, str("expected ", type_name<T>()));
  }
}

template <typename T>
T ConfigSection::require(const std::string& key) {
  known_->insert(full_key(key));
  YAML::Node value = node_[key];
  if (!value.IsDefined() || value.IsNull()) {
    throw ConfigError(str("missing required key '", full_key(key),
                          "': set it in the config file "
                          "or with --set ",
                          full_key(key), "=..."));
  }
  return get<T>(key, T{});
}

template bool ConfigSection::get<bool>(const std::string&, const bool&);
template int ConfigSection::get<int>(const std::string&, const int&);
template std::int64_t ConfigSection::get<std::int64_t>(const std::string&, const std::int64_t&);
template std::uint64_t ConfigSection::get<std::uint64_t>(const std::string&, const std::uint64_t&);
template double ConfigSection::get<double>(const std::string&, const double&);
template std::string ConfigSection::get<std::string>(const std::string&, const std::string&);
template std::vector<int> ConfigSection::get<std::vector<int>>(const std::string&,
                                                               const std::vector<int>&);
template std::vector<std::int64_t> ConfigSection::get<std::vector<std::int64_t>>(
    const std::string&, const std::vector<std::int64_t>&);
template std::vector<double> ConfigSection::get<std::vector<double>>(const std::string&,
                                                                     const std::vector<double>&);
template std::vector<std::string> ConfigSection::get<std::vector<std::string>>(
    const std::string&, const std::vector<std::string>&);
template std::string ConfigSection::require<std::string>(const std::string&);
template int ConfigSection::require<int>(const std::string&);
template std::int64_t ConfigSection::require<std::int64_t>(const std::string&);
template double ConfigSection::require<double>(const std::string&);

}  // namespace hpctrain
