#pragma once
// Run configuration: a YAML tree with sections (run, model, data, optim, schedule, parallel, eval,
// checkpoint, logging). Each component owns its section and reads it through ConfigSection, which
// records defaults into the tree (so the resolved config written to the run directory is
// complete), names the full key in every type or value error, and lets Config::check_unknown_keys
// report keys nobody read ("unknown key 'optim.lrr'; did you mean 'optim.lr'?").

#include <yaml-cpp/yaml.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace hpctrain {

class ConfigSection;

/// The whole configuration. Local: every rank loads the same file and overrides and validates it
/// identically, so every rank reports the same error before any collective.
class Config {
 public:
  /// An empty configuration (all defaults).
  Config();
  /// Loads `path`; throws ConfigError naming the file (missing, unreadable, YAML syntax with line).
  static Config load(const std::string& path);
  /// Parses YAML text (tests, stored configs); `origin` names it in messages.
  static Config parse(const std::string& text, const std::string& origin);

  /// Applies "a.b.c=value" (value parsed as YAML: 3e-4, true, [1, 2], text). Throws ConfigError
  /// for a malformed override.
  void set(const std::string& assignment);

  /// The section named `name` (created empty if absent).
  ConfigSection section(const std::string& name);

  /// Throws ConfigError listing every key present in the tree that no section read, with the
  /// closest known key as a suggestion. Call after every component has read its section.
  void check_unknown_keys() const;

  /// The resolved tree (file + overrides + defaults recorded while reading) as YAML text.
  std::string dump() const;
  /// Where the config came from ("configs/fmnist-mlp.yaml", "<text>"). Local.
  const std::string& origin() const { return origin_; }
  /// The raw tree. Local.
  YAML::Node& root() { return root_; }

 private:
  friend class ConfigSection;
  YAML::Node root_;
  std::string origin_;
  std::shared_ptr<std::set<std::string>> known_;  // full keys that some section read
};

/// One section (or nested map) of the config. Getters record the key as known and the default
/// into the tree when the key is absent.
class ConfigSection {
 public:
  ConfigSection(YAML::Node node, std::string path, std::shared_ptr<std::set<std::string>> known);

  /// Value at `key`, or `fallback` (recorded) when absent. Throws ConfigError naming the full key
  /// and the expected type when the value does not convert.
  template <typename T>
  T get(const std::string& key, const T& fallback);
  /// Value at `key`; throws ConfigError "missing required key" when absent.
  template <typename T>
  T require(const std::string& key);
  /// The value at `key` as text: a scalar as it is, a list or map as one line of YAML flow text
  /// ("[{path: a/*.h5, weight: 0.7}, ...]"); `fallback` (recorded) when absent. For keys that
  /// take a path or a list of them (data.train). Local.
  std::string get_text_or_list(const std::string& key, const std::string& fallback);
  /// Whether `key` is present (and marks it known).
  bool has(const std::string& key);
  /// A nested map.
  ConfigSection section(const std::string& key);

  /// "optim.lr" for key "lr" in section "optim". Local.
  std::string full_key(const std::string& key) const;
  /// Throws ConfigError "<full key> = <value>: <why>". Local.
  [[noreturn]] void fail(const std::string& key, const std::string& why) const;
  /// Checks that `value` is one of `choices`, else fails listing them.
  void check_choice(const std::string& key, const std::string& value,
                    const std::vector<std::string>& choices) const;
  /// The enum value named at `key` (or `fallback` when absent), one of `choices` (name, value);
  /// fails listing the names otherwise. Strings end here: layers keep the enum.
  template <typename E>
  E get_choice(const std::string& key, E fallback,
               const std::vector<std::pair<std::string, E>>& choices) {
    std::string fallback_name;
    std::vector<std::string> names;
    for (const auto& [name, value] : choices) {
      names.push_back(name);
      if (value == fallback && fallback_name.empty()) fallback_name = name;
    }
    const auto text = get<std::string>(key, fallback_name);
    check_choice(key, text, names);
    for (const auto& [name, value] : choices) {
      if (name == text) return value;
    }
    return fallback;
  }

 private:
  YAML::Node node_;
  std::string path_;
  std::shared_ptr<std::set<std::string>> known_;
};

}  // namespace hpctrain
