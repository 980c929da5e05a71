// The llama family against Hugging Face's config.json and tensor names (llama_hf.hpp).

#include "hpctrain/model/llama_hf.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {
namespace {

using nlohmann::json;

struct Architecture {
  const char* hf;
  const char* model_type;
  LlamaArchitecture value;
};

const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> all = {
      {"LlamaForCausalLM", "llama", LlamaArchitecture::kLlama},
      {"Qwen2ForCausalLM", "qwen2", LlamaArchitecture::kQwen2},
      {"Qwen3ForCausalLM", "qwen3", LlamaArchitecture::kQwen3},
      {"MistralForCausalLM", "mistral", LlamaArchitecture::kMistral},
  };
  return all;
}

json read_json(const std::string& file) {
  runtime::require_regular_file(file, runtime::FileKind::kCheckpoint, "Hugging Face config",
                                "give a Hugging Face model folder");
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  try {
    json j = json::parse(text.str());
    if (!j.is_object()) throw CheckpointError(str(file, " is not a JSON object"));
    return j;
  } catch (const json::parse_error& e) {
    throw CheckpointError(str("model.init_from: ", file, " is not valid JSON (byte ", e.byte,
                              "): give the folder's config.json as Hugging Face writes it"));
  }
}

// Sets or checks the model section's keys against one config.json.
class HfKeys {
 public:
  HfKeys(ConfigSection& section, std::string file) : section_(section), file_(std::move(file)) {}

  template <typename T>
  void apply(const std::string& key, const std::string& hf_key, const T& value) {
    if (!section_.has(key)) {
      section_.get<T>(key, value);
      return;
    }
    const T mine = section_.get<T>(key, value);
    if (!same(mine, value)) {
      section_.fail(key, str("disagrees with ", file_, ": ", hf_key, " = ", text(value),
                             "; remove model.", key,
                             " (config.json sets it) or point model.init_from at the model's "
                             "own folder"));
    }
  }

  [[noreturn]] void refuse(const std::string& field, const std::string& why) const {
    throw CheckpointError(str("model.init_from: ", file_, ": ", field, ": ", why));
  }

 private:
  static bool same(double a, double b) { return std::fabs(a - b) <= 1e-12 * std::fabs(b); }
  static bool same(std::int64_t a, std::int64_t b) { return a == b; }
  static bool same(bool a, bool b) { return a == b; }
  static bool same(const std::string& a, const std::string& b) { return a == b; }
  static std::string text(bool b) { return b ? "true" : "false"; }
  template <typename T>
  static std::string text(const T& v) {
    return str(v);
  }

  ConfigSection& section_;
  std::string file_;
};

template <typename T>
T field(const json& j, const std::string& key, const HfKeys& keys) {
  if (!j.contains(key) || j.at(key).is_null()) keys.refuse(key, "missing");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    keys.refuse(key, str("has the wrong type (", j.at(key).dump(), ")"));
  }
}

const Architecture& architecture_of(const json& cfg, const HfKeys& keys) {
  std::string names;
  if (cfg.contains("architectures") && cfg.at("architectures").is_array()) {
    for (const auto& a : cfg.at("architectures")) {
      if (!a.is_string()) continue;
      for (const auto& known : architectures()) {
        if (a.get<std::string>() == known.hf) return known;
      }
      names += (names.empty() ? "" : ", ") + a.get<std::string>();
    }
  }
  keys.refuse("architectures",
              str(names.empty() ? std::string("missing") : "[" + names + "]",
                  " is not an architecture hpctrain's llama family reads (LlamaForCausalLM, "
                  "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM): give a folder of one "
                  "of these"));
}

void apply_rope_scaling(const json& cfg, HfKeys& keys) {
  if (!cfg.contains("rope_scaling") || cfg.at("rope_scaling").is_null()) {
    keys.apply<std::string>("rope_scaling", "rope_scaling", "none");
    return;
  }
  const json& r = cfg.at("rope_scaling");
  const std::string type = r.contains("rope_type") ? r.value("rope_type", std::string())
                                                   : r.value("type", std::string());
  if (type != "llama3") {
    keys.refuse("rope_scaling", str("rope_type '", type,
                                    "' is not implemented (the llama family has Llama-3.1's "
                                    "'llama3' scaling only)"));
  }
  keys.apply<std::string>("rope_scaling", "rope_scaling.rope_type", "llama3");
  keys.apply<double>("rope_factor", "rope_scaling.factor", field<double>(r, "factor", keys));
  keys.apply<double>("rope_low_freq_factor", "rope_scaling.low_freq_factor",
                     field<double>(r, "low_freq_factor", keys));
  keys.apply<double>("rope_high_freq_factor", "rope_scaling.high_freq_factor",
                     field<double>(r, "high_freq_factor", keys));
  keys.apply<std::int64_t>("rope_original_context", "rope_scaling.original_max_position_embeddings",
                           field<std::int64_t>(r, "original_max_position_embeddings", keys));
}

}  // namespace

std::string hf_architecture_name(LlamaArchitecture a) {
  for (const auto& known : architectures()) {
    if (known.value == a) return known.hf;
  }
  return "LlamaForCausalLM";
}

void apply_hf_config(ConfigSection& section) {
  if (!section.has("init_from")) return;
  const std::string dir = section.get<std::string>("init_from", "");
  if (dir.empty() || runtime::path_type(dir) != runtime::PathType::kDirectory) return;
  const std::string file = dir + "/config.json";
  if (runtime::path_type(file) == runtime::PathType::kMissing) return;
  const json cfg = read_json(file);
  HfKeys keys(section, file);
  const Architecture& arch = architecture_of(cfg, keys);
  keys.apply<std::string>("architecture", "architectures", arch.model_type);
  if (cfg.value("hidden_act", std::string("silu")) != "silu") {
    keys.refuse("hidden_act", str("'", cfg.at("hidden_act").get<std::string>(),
                                  "' is not silu, the llama family's SwiGLU activation"));
  }
  if (cfg.value("mlp_bias", false)) keys.refuse("mlp_bias", "true is not implemented");
  const bool attention_bias = cfg.value("attention_bias", false);
  if (attention_bias && arch.value != LlamaArchitecture::kQwen2) {
    keys.refuse("attention_bias",
                "true (a bias on o_proj as well as q, k, v) is not implemented; the llama family "
                "has q/k/v biases (Qwen2) only");
  }
  keys.apply<std::int64_t>("vocab_size", "vocab_size",
                           field<std::int64_t>(cfg, "vocab_size", keys));
  keys.apply<std::int64_t>("layers", "num_hidden_layers",
                           field<std::int64_t>(cfg, "num_hidden_layers", keys));
  const auto width = field<std::int64_t>(cfg, "hidden_size", keys);
  const auto heads = field<std::int64_t>(cfg, "num_attention_heads", keys);
  if (heads < 1) keys.refuse("num_attention_heads", "must be positive");
  keys.apply<std::int64_t>("width", "hidden_size", width);
  keys.apply<std::int64_t>("heads", "num_attention_heads", heads);
  const bool has_kv =
      cfg.contains("num_key_value_heads") && !cfg.at("num_key_value_heads").is_null();
  keys.apply<std::int64_t>("kv_heads", "num_key_value_heads",
                           has_kv ? field<std::int64_t>(cfg, "num_key_value_heads", keys) : heads);
  const bool has_hd = cfg.contains("head_dim") && !cfg.at("head_dim").is_null();
  keys.apply<std::int64_t>("head_dim", "head_dim",
                           has_hd ? field<std::int64_t>(cfg, "head_dim", keys) : width / heads);
  keys.apply<std::int64_t>("ffn_width", "intermediate_size",
                           field<std::int64_t>(cfg, "intermediate_size", keys));
  if (cfg.contains("max_position_embeddings")) {
    keys.apply<std::int64_t>("max_positions", "max_position_embeddings",
                             field<std::int64_t>(cfg, "max_position_embeddings", keys));
  }
  keys.apply<double>("norm_eps", "rms_norm_eps", cfg.value("rms_norm_eps", 1e-6));
  keys.apply<double>("rope_theta", "rope_theta", cfg.value("rope_theta", 10000.0));
  apply_rope_scaling(cfg, keys);
  keys.apply<bool>("qkv_bias", "attention_bias",
                   arch.value == LlamaArchitecture::kQwen2 || attention_bias);
  keys.apply<bool>("qk_norm", "architectures", arch.value == LlamaArchitecture::kQwen3);
  keys.apply<bool>("tied_embeddings", "tie_word_embeddings",
                   cfg.value("tie_word_embeddings", false));
  // A sliding window the sequences never reach is full causal attention.
  const bool windowed =
      arch.value == LlamaArchitecture::kMistral ? true : cfg.value("use_sliding_window", false);
  if (windowed && cfg.contains("sliding_window") && cfg.at("sliding_window").is_number()) {
    const auto window = cfg.at("sliding_window").get<std::int64_t>();
    const auto seq_len = section.get<std::int64_t>("seq_len", LlamaOptions{}.seq_len);
    if (seq_len > window) {
      section.fail("seq_len", str("is longer than ", file, "'s sliding_window = ", window,
                                  ", which the llama family does not implement (its attention "
                                  "is full causal): set model.seq_len <= ",
                                  window));
    }
  }
}

nlohmann::json llama_hf_config(const LlamaOptions& o) {
  const LlamaArchitecture a = o.architecture;
  if (o.qkv_bias != (a == LlamaArchitecture::kQwen2)) {
    throw ConfigError(str("model.qkv_bias = ", o.qkv_bias ? "true" : "false",
                          " with model.architecture = ", llama_architecture_name(a),
                          ": Hugging Face's ", hf_architecture_name(a),
                          o.qkv_bias ? " has no q/k/v-only bias (use architecture qwen2)"
                                     : " always has q/k/v biases",
                          "; the folder could not be read back as this model"));
  }
  if (o.qk_norm != (a == LlamaArchitecture::kQwen3)) {
    throw ConfigError(
        str("model.qk_norm = ", o.qk_norm ? "true" : "false", " with model.architecture = ",
            llama_architecture_name(a), ": Hugging Face's ", hf_architecture_name(a),
            o.qk_norm ? " has no q/k norm (use architecture qwen3)" : " always has the q/k norm",
            "; the folder could not be read back as this model"));
  }
  json j;
  j["architectures"] = json::array({hf_architecture_name(a)});
  j["model_type"] = llama_architecture_name(a);
  j["vocab_size"] = o.vocab_size;
  j["hidden_size"] = o.width;
  j["intermediate_size"] = o.ffn_width;
  j["num_hidden_layers"] = o.layers;
  j["num_attention_heads"] = o.heads;
  j["num_key_value_heads"] = o.kv_heads;
  j["head_dim"] = o.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = o.max_positions;
  j["rms_norm_eps"] = o.norm_eps;
  j["rope_theta"] = o.rope_theta;
  if (o.rope.llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", o.rope.factor},
                         {"low_freq_factor", o.rope.low_freq_factor},
                         {"high_freq_factor", o.rope.high_freq_factor},
                         {"original_max_position_embeddings", o.rope.original_context}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (a != LlamaArchitecture::kQwen2) j["attention_bias"] = false;
  if (a == LlamaArchitecture::kLlama) j["mlp_bias"] = false;
  if (a == LlamaArchitecture::kMistral) j["sliding_window"] = nullptr;
  if (a == LlamaArchitecture::kQwen2 || a == LlamaArchitecture::kQwen3) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  j["tie_word_embeddings"] = o.tied_embeddings;
  j["initializer_range"] = o.init_std;
  j["attention_dropout"] = 0.0;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  return j;
}

std::vector<HfTensor> llama_hf_tensors(const LlamaOptions& o) {
  std::vector<HfTensor> out{{"wte.weight", {"model.embed_tokens.weight"}}};
  for (std::int64_t i = 0; i < o.layers; ++i) {
    const std::string h = str("model.layers.", i, ".");
    const std::string b = str("blocks.", i, ".");
    out.push_back({b + "attn_norm.weight", {h + "input_layernorm.weight"}});
    for (const char* p : {"q", "k", "v"}) {
      out.push_back({str(b, "attn.", p, ".weight"), {str(h, "self_attn.", p, "_proj.weight")}});
      if (o.qkv_bias) {
        out.push_back({str(b, "attn.", p, ".bias"), {str(h, "self_attn.", p, "_proj.bias")}});
      }
    }
    out.push_back({b + "attn.o.weight", {h + "self_attn.o_proj.weight"}});
    if (o.qk_norm) {
      out.push_back({b + "attn.q_norm.weight", {h + "self_attn.q_norm.weight"}});
      out.push_back({b + "attn.k_norm.weight", {h + "self_attn.k_norm.weight"}});
    }
    out.push_back({b + "mlp_norm.weight", {h + "post_attention_layernorm.weight"}});
    out.push_back(
        {b + "mlp.gate_up.weight", {h + "mlp.gate_proj.weight", h + "mlp.up_proj.weight"}});
    out.push_back({b + "mlp.down.weight", {h + "mlp.down_proj.weight"}});
  }
  out.push_back({"norm.weight", {"model.norm.weight"}});
  if (!o.tied_embeddings) out.push_back({"lm_head.weight", {"lm_head.weight"}});
  return out;
}

}  // namespace hpctrain::model
