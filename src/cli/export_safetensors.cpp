// `hpctrain export --format safetensors` (export_safetensors.hpp).

#include "export_safetensors.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "hpctrain/checkpoint/safetensors.hpp"
#include "hpctrain/checkpoint/weights_file.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/gpt2_names.hpp"
#include "hpctrain/model/llama_hf.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeights = "model.safetensors";
constexpr const char* kConfig = "config.json";
constexpr const char* kGeneration = "generation_config.json";

using Named = std::vector<std::pair<std::string, torch::Tensor>>;

bool is_shard_name(const std::string& name) {
  return name.rfind("model-", 0) == 0 && name.size() > 12 &&
         name.compare(name.size() - 12, 12, ".safetensors") == 0;
}

// Hugging Face's rule: tensors in order, a new shard when the next tensor would take the current
// one past `max_bytes` (a tensor larger than that alone in its shard).
std::vector<Named> cut_into_shards(const Named& tensors, std::int64_t max_bytes) {
  std::vector<Named> shards(1);
  std::int64_t bytes = 0;
  for (const auto& item : tensors) {
    const auto n = static_cast<std::int64_t>(item.second.numel() * item.second.element_size());
    if (!shards.back().empty() && bytes + n > max_bytes) {
      shards.emplace_back();
      bytes = 0;
    }
    shards.back().push_back(item);
    bytes += n;
  }
  return shards;
}

void write_json(const fs::path& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw ConfigError(str("cannot write ", path.string(), ": check --out"));
}

// The weights, in one file or in shards with their index. Returns the files' description.
std::string write_weights(const fs::path& dir, const Named& tensors,
                          const std::map<std::string, std::string>& metadata,
                          std::int64_t max_shard_bytes) {
  const std::vector<Named> shards = cut_into_shards(tensors, max_shard_bytes);
  if (shards.size() == 1) {
    checkpoint::write_safetensors((dir / kWeights).string(), tensors, metadata);
    return kWeights;
  }
  nlohmann::ordered_json index;
  std::int64_t total = 0;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    checkpoint::write_safetensors((dir / name).string(), shards[s], metadata);
    for (const auto& item : shards[s]) {
      index["weight_map"][item.first] = name;
      total += static_cast<std::int64_t>(item.second.numel() * item.second.element_size());
    }
  }
  index["metadata"] = {{"total_size", total}};
  write_json(dir / checkpoint::kSafetensorsIndex, index);
  return str(shards.size(), " safetensors shards of at most ", max_shard_bytes, " bytes with ",
             checkpoint::kSafetensorsIndex);
}

// A llama's parameters under Hugging Face's names (gate_up split into gate_proj and up_proj).
Named llama_tensors(const model::LlamaOptions& options,
                    const std::map<std::string, torch::Tensor>& params) {
  Named out;
  for (const auto& t : model::llama_hf_tensors(options)) {
    auto it = params.find(t.name);
    if (it == params.end()) {
      throw Error(str("export: the llama has no parameter ", t.name, " (internal error)"));
    }
    for (std::size_t i = 0; i < t.hf_names.size(); ++i) {
      out.emplace_back(t.hf_names[i], t.hf_names.size() == 1
                                          ? it->second.contiguous()
                                          : it->second[static_cast<std::int64_t>(i)].contiguous());
    }
  }
  return out;
}

// GPT-2's config.json for the gpt: what GPT2Config reads, with hpctrain's fixed choices (tanh GELU
// as "gelu_new", LayerNorm eps 1e-5, attention scaled by 1/sqrt(head_dim)).
nlohmann::ordered_json gpt2_config(const model::GptOptions& o) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = o.vocab_size;
  j["n_positions"] = o.seq_len;
  j["n_ctx"] = o.seq_len;
  j["n_embd"] = o.width;
  j["n_layer"] = o.layers;
  j["n_head"] = o.heads;
  j["n_inner"] = o.mlp_width();
  j["activation_function"] = "gelu_new";
  j["resid_pdrop"] = o.dropout;
  j["embd_pdrop"] = o.dropout;
  j["attn_pdrop"] = o.dropout;
  j["layer_norm_epsilon"] = 1e-5;
  j["initializer_range"] = 0.02;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = o.tied_embeddings;
  j["bos_token_id"] = nullptr;  // the tokenizer's, which hpctrain does not know
  j["eos_token_id"] = nullptr;
  j["torch_dtype"] = "float32";
  return j;
}

// Removes `dir` when it holds nothing but what an export writes; refuses otherwise.
void clear_previous(const fs::path& dir) {
  if (!fs::exists(dir)) return;
  if (!fs::is_directory(dir)) {
    throw ConfigError(str("--out ", dir.string(),
                          " exists and is not a directory: --format safetensors writes a folder "
                          "(model.safetensors, config.json); choose a new path"));
  }
  const std::set<std::string> ours{kWeights, kConfig, kGeneration, checkpoint::kSafetensorsIndex};
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (ours.count(name) == 0 && !is_shard_name(name)) {
      throw ConfigError(str("--out ", dir.string(), " holds ", entry.path().filename().string(),
                            ", which an export did not write: choose a new or empty folder"));
    }
  }
  fs::remove_all(dir);
}

}  // namespace

std::string export_safetensors(model::Model& model, const std::string& out_dir,
                               const std::string& checkpoint, std::int64_t step,
                               std::int64_t max_shard_bytes) {
  const fs::path out = fs::absolute(out_dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {"hpctrain_checkpoint", checkpoint},
                                              {"hpctrain_step", std::to_string(step)}};
  auto* gpt = dynamic_cast<model::Gpt*>(&model);
  auto* llama = dynamic_cast<model::Llama*>(&model);
  std::map<std::string, torch::Tensor> params;
  for (const auto& item : model.named_parameters(true)) {
    params[item.key()] = item.value().detach();
  }
  if (gpt != nullptr) {
    metadata["hpctrain_names"] = "gpt2";
    for (const auto& t : model::gpt2_tensors(gpt->options())) {
      auto it = params.find(t.name);
      if (it == params.end()) {
        throw Error(str("export: the gpt has no parameter ", t.name, " (internal error)"));
      }
      tensors.emplace_back(t.gpt2_name, model::to_gpt2(it->second, t.layout));
    }
  } else if (llama != nullptr) {
    metadata["hpctrain_names"] = "hugging_face";
    tensors = llama_tensors(llama->options(), params);
  } else {
    for (const auto& item : model.named_parameters(true)) {
      tensors.emplace_back(item.key(), item.value().detach());
    }
    for (const auto& item : model.named_buffers(true)) {
      tensors.emplace_back(item.key(), item.value().detach());
    }
  }
  fs::path tmp = out;
  tmp += ".tmp";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  std::string files;
  try {
    files = write_weights(tmp, tensors, metadata, max_shard_bytes);
    if (gpt != nullptr) write_json(tmp / kConfig, gpt2_config(gpt->options()));
    if (llama != nullptr) {
      write_json(tmp / kConfig, model::llama_hf_config(llama->options()));
      write_json(
          tmp / kGeneration,
          {{"_from_model_config", true}, {"bos_token_id", nullptr}, {"eos_token_id", nullptr}});
    }
    clear_previous(out);
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  std::string what = " under the model's names";
  if (gpt != nullptr) {
    what = str(" under GPT-2's names, with ", kConfig, ": a GPT2LMHeadModel folder");
  } else if (llama != nullptr) {
    what = str(" under Hugging Face's names, with ", kConfig, " and ", kGeneration, ": a ",
               model::hf_architecture_name(llama->options().architecture), " folder");
  }
  return str(out.string(), ": ", files, " (", tensors.size(), " tensors", what, ")");
}

}  // namespace hpctrain::cli
