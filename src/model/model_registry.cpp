#include <map>

#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

// Model families; each is defined in its own file.
std::shared_ptr<Model> make_mlp(ConfigSection& section, const ModelContext& ctx);
std::shared_ptr<Model> make_cnn(ConfigSection& section, const ModelContext& ctx);
std::shared_ptr<Model> make_gpt(ConfigSection&, const ModelContext&);

namespace {

const std::map<std::string, ModelFactory>& registry() {
  static const std::map<std::string, ModelFactory> factories = {
      {"mlp", make_mlp},
      {"cnn", make_cnn},
      {"gpt", make_gpt},
  };
  return factories;
}

}  // namespace

ShardInfo Model::shard_info(const std::string& name) const {
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    if (item.key() == name) return ShardInfo{item.value().sizes().vec(), -1};
  }
  for (const auto& item : named_buffers(/*recurse=*/true)) {
    if (item.key() == name) return ShardInfo{item.value().sizes().vec(), -1};
  }
  throw Error(str("model has no parameter or buffer named '", name, "'"));
}

std::int64_t Model::logical_parameter_count() const {
  std::int64_t total = 0;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    std::int64_t n = 1;
    for (auto d : shard_info(item.key()).logical_shape) n *= d;
    total += n;
  }
  return total;
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::shared_ptr<Model> build_model(ConfigSection& section, const ModelContext& ctx) {
  const std::string name = section.get<std::string>("name", "mlp");
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    section.fail("name", str("unknown model; known models: ", known));
  }
  try {
    return it->second(section, ctx);
  } catch (const std::bad_alloc&) {
    throw ConfigError(
        str("model.name = ", name,
            ": out of memory while allocating the model's parameters: the sizes in "
            "the model section (widths, layers, vocab_size, in_features) are too large "
            "for this machine's memory"));
  } catch (const c10::Error& e) {
    throw ConfigError(str("model.name = ", name, ": building the model failed (",
                          clip(e.what_without_backtrace(), 300),
                          "): check the sizes in the model section (widths, layers, vocab_size, "
                          "in_features)"));
  }
}

}  // namespace hpctrain::model
