#include <dlfcn.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/llama.hpp"
#include "hpctrain/model/llama_hf.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/model_family.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {

// Model families; each is defined in its own file.
std::shared_ptr<Model> make_mlp(ConfigSection& section, const ModelContext& ctx);
std::shared_ptr<Model> make_cnn(ConfigSection& section, const ModelContext& ctx);
std::shared_ptr<Model> make_gpt(ConfigSection&, const ModelContext&);
std::shared_ptr<Model> make_llama(ConfigSection&, const ModelContext&);
std::shared_ptr<Model> make_torchscript(ConfigSection& section, const ModelContext& ctx);

namespace {

DecoderFacts gpt_facts(ConfigSection& section, int tp) {
  const GptOptions g = read_gpt_options(section, tp);
  return {gpt_shape(g), g.heads, g.dropout > 0, g.recompute};
}

DecoderFacts llama_facts(ConfigSection& section, int tp) {
  const LlamaOptions o = read_llama_options(section, tp);
  return {llama_shape(o), o.heads, false, o.recompute};
}

struct Registered {
  ModelFamily family;
  ModelFactory factory;
};

// The built-in families and their facts (model_family.hpp); plugins add theirs without facts.
std::map<std::string, Registered>& registry() {
  static std::map<std::string, Registered> families = [] {
    ModelFamily mlp{"mlp", Task::kClassification};
    mlp.single_stage = mlp.rebuilt_by_export = true;
    ModelFamily cnn{"cnn", Task::kClassification};
    cnn.single_stage = cnn.rebuilt_by_export = true;
    ModelFamily gpt{"gpt", Task::kLanguageModel};
    gpt.decoder = gpt.rebuilt_by_export = true;
    gpt.decoder_facts = gpt_facts;
    ModelFamily llama{"llama", Task::kLanguageModel};
    llama.decoder = true;
    llama.prepare_section = apply_hf_config;
    llama.decoder_facts = llama_facts;
    ModelFamily torchscript{"torchscript", std::nullopt};
    torchscript.single_stage = true;
    std::map<std::string, Registered> out;
    auto add = [&](ModelFamily family, ModelFactory factory) {
      const std::string name = family.name;
      out.emplace(name, Registered{std::move(family), std::move(factory)});
    };
    add(mlp, make_mlp);
    add(cnn, make_cnn);
    add(gpt, make_gpt);
    add(llama, make_llama);
    add(torchscript, make_torchscript);
    return out;
  }();
  return families;
}

std::mutex& plugin_mutex() {
  static std::mutex m;
  return m;
}

// The decoder families' names: "gpt and llama".
std::string decoder_names() {
  std::vector<std::string> names;
  for (const auto& [name, registered] : registry()) {
    if (registered.family.decoder) names.push_back(name);
  }
  return and_list(names);
}

std::string pipeline_refusal(const std::string& name, const PipelinePart& part) {
  return str("model.name = ", name, " cannot be cut into pipeline stages (parallel.pp = ", part.pp,
             part.virtual_stages > 1 ? str(" x parallel.pp_virtual = ", part.virtual_stages) : "",
             "): only a model that defines its stages can (the built-in ", decoder_names(),
             "); set parallel.pp: 1 and use data or tensor parallelism, or parallel.shard: "
             "optimizer (or gradients, full) to save memory");
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

std::vector<std::vector<std::string>> Model::units_of(
    const std::vector<const torch::nn::Module*>& modules) const {
  std::map<const void*, std::string> name_of;
  for (const auto& item : named_parameters(/*recurse=*/true)) {
    name_of[item.value().unsafeGetTensorImpl()] = item.key();
  }
  std::vector<std::vector<std::string>> units;
  for (const auto* module : modules) {
    units.emplace_back();
    for (const auto& p : module->parameters(/*recurse=*/true)) {
      units.back().push_back(name_of.at(p.unsafeGetTensorImpl()));
    }
  }
  return units;
}

void Model::wait_for_parameters(const torch::nn::Module& module) const {
  if (!parameter_wait_) return;
  for (const auto& p : module.parameters(/*recurse=*/true)) parameter_wait_(p);
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

torch::Tensor Model::forward_chunk(int chunk, const torch::Tensor& input) {
  if (chunk != 0) {
    throw Error(str("forward_chunk(", chunk, "): this model is not cut into pipeline stages"));
  }
  return forward(input);
}

std::vector<std::int64_t> Model::stage_activation_shape(const torch::Tensor& inputs) const {
  (void)inputs;
  throw Error("stage_activation_shape: this model is not cut into pipeline stages");
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& [name, registered] : registry()) names.push_back(name);
  return names;
}

const ModelFamily* find_model_family(const std::string& name) {
  const auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second.family;
}

void register_model(const std::string& name, ModelFactory factory) {
  if (name.empty() || name.find_first_of(" \t\n") != std::string::npos) {
    throw Error(str("cannot register a model named '", name, "': use a word such as 'resnet'"));
  }
  ModelFamily family;
  family.name = name;
  if (!registry().emplace(name, Registered{std::move(family), std::move(factory)}).second) {
    throw Error(str("a model named '", name,
                    "' is registered already (built-in models and plugins share one set of "
                    "names): give the plugin's model another name"));
  }
}

void load_plugin(const std::string& path, const std::string& key) {
  std::lock_guard<std::mutex> lock(plugin_mutex());
  static std::set<std::string> loaded;
  // stat(2) only: dlopen of a FIFO would block in open(2).
  const runtime::PathType type = runtime::path_type(path);
  if (type != runtime::PathType::kRegular) {
    throw ConfigError(str(key, " = ", path,
                          type == runtime::PathType::kMissing
                              ? std::string(": no such file")
                              : str(" is not a regular file (", runtime::path_type_name(type), ")"),
                          ": build the plugin (a shared library of models, see "
                          "docs/MODELS.md) and pass its path"));
  }
  const std::string canonical = std::filesystem::canonical(path).string();
  if (loaded.count(canonical)) return;
  const std::size_t before = registry().size();
  // RTLD_GLOBAL: the plugin's symbols stay visible to libraries it loads in turn. Its own
  // undefined hpctrain symbols resolve against this executable, which exports them.
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char* why = ::dlerror();
    throw ConfigError(str(key, " = ", path, " does not load: ", why ? why : "unknown reason",
                          ": build it against this hpctrain's installed package "
                          "(find_package(hpctrain)) and the same LibTorch"));
  }
  loaded.insert(canonical);
  if (registry().size() == before) {
    throw ConfigError(str(key, " = ", path,
                          " loaded but registered no model: add HPCTRAIN_REGISTER_MODEL(\"name\", "
                          "factory) to one of its source files"));
  }
  std::string names;
  for (const auto& name : model_names()) names += (names.empty() ? "" : ", ") + name;
  log::debug(str("loaded plugin ", canonical, "; models: ", names));
}

std::shared_ptr<Model> build_model(ConfigSection& section, const ModelContext& ctx) {
  if (section.has("plugin")) load_plugin(section.get<std::string>("plugin", ""), "model.plugin");
  const std::string name = section.get<std::string>("name", "mlp");
  // Read here so that every command taking a model section knows the key; the trainer applies it
  // (checkpoint/init_from.hpp), and only to a run that starts fresh.
  if (section.has("init_from") && section.get<std::string>("init_from", "").empty()) {
    section.fail("init_from",
                 "is empty: give a checkpoint, a Hugging Face model folder, a safetensors or "
                 "torch.save file, or "
                 "remove the key");
  }
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& n : model_names()) known += (known.empty() ? "" : ", ") + n;
    section.fail("name", str("unknown model; known models: ", known,
                             " (a C++ model of your own: load its plugin with --plugin PATH or "
                             "model.plugin)"));
  }
  const ModelFamily& family = it->second.family;
  if (!family.decoder && section.has("recompute")) {
    const std::string mode = section.get<std::string>("recompute", "none");
    if (mode != "none") {
      section.fail("recompute", str("activation recomputation is supported by the ",
                                    decoder_names(), " models only, not by ", name,
                                    "; remove model.recompute or set it to none"));
    }
  }
  if (ctx.pipeline.cut() && family.single_stage) {
    // Known before building: this built-in family is one stage.
    throw ConfigError(pipeline_refusal(name, ctx.pipeline));
  }
  try {
    std::shared_ptr<Model> model = it->second.factory(section, ctx);
    if (ctx.pipeline.cut() && model->pipeline_chunks() == 0) {
      throw ConfigError(pipeline_refusal(name, ctx.pipeline));
    }
    return model;
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
