// `hpctrain export --format safetensors` (export_safetensors.hpp).

#include "export_safetensors.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "hpctrain/checkpoint/safetensors.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/gpt2_names.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kWeights = "model.safetensors";
constexpr const char* kConfig = "config.json";

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
  const std::set<std::string> ours{kWeights, kConfig};
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (ours.count(entry.path().filename().string()) == 0) {
      throw ConfigError(str("--out ", dir.string(), " holds ", entry.path().filename().string(),
                            ", which an export did not write: choose a new or empty folder"));
    }
  }
  fs::remove_all(dir);
}

}  // namespace

std::string export_safetensors(model::Model& model, const std::string& out_dir,
                               const std::string& checkpoint, std::int64_t step) {
  const fs::path out = fs::absolute(out_dir);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {"hpctrain_checkpoint", checkpoint},
                                              {"hpctrain_step", std::to_string(step)}};
  auto* gpt = dynamic_cast<model::Gpt*>(&model);
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
  try {
    checkpoint::write_safetensors((tmp / kWeights).string(), tensors, metadata);
    if (gpt != nullptr) {
      std::ofstream f(tmp / kConfig);
      f << gpt2_config(gpt->options()).dump(2) << "\n";
      f.close();
      if (!f) throw ConfigError(str("cannot write ", (tmp / kConfig).string(), ": check --out"));
    }
    clear_previous(out);
    fs::rename(tmp, out);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  return str(out.string(), "/", kWeights, " (", tensors.size(), " tensors",
             gpt != nullptr
                 ? str(" under GPT-2's names, with ", kConfig, ": a GPT2LMHeadModel folder")
                 : std::string(" under the model's names"),
             ")");
}

}  // namespace hpctrain::cli
