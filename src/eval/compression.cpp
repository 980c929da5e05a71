#include "hpctrain/eval/compression.hpp"

#include <cmath>
#include <set>
#include <sstream>

#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_linear.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {

void CompressionSpec::validate() const {
  if (!quantize.empty() && quantize != "int8") {
    throw ConfigError(str("--quantize ", quantize,
                          ": hpctrain quantizes linear layers to int8 only (dynamic, weights per "
                          "output channel): use --quantize int8"));
  }
  if (!(prune >= 0 && prune < 1) || std::isnan(prune)) {
    throw ConfigError(str("--prune ", prune,
                          ": the sparsity is the fraction of weights set to zero, in (0, 1): e.g. "
                          "--prune 0.5"));
  }
  if (scope != "global" && scope != "layer") {
    throw ConfigError(str("--prune-scope ", scope,
                          ": use global (one magnitude threshold over every prunable weight) or "
                          "layer (the same sparsity in each layer)"));
  }
}

std::string CompressionSpec::tag() const {
  std::string t = quantize;
  if (prune > 0) {
    std::ostringstream s;
    s << "prune" << prune << (scope == "layer" ? "-layer" : "");
    t += (t.empty() ? "" : "-") + s.str();
  }
  return t;
}

nlohmann::ordered_json CompressionSpec::to_json() const {
  nlohmann::ordered_json j{{"quantize", quantize.empty() ? nullptr : nlohmann::json(quantize)},
                           {"prune", prune}};
  if (prune > 0) j["prune_scope"] = scope;
  return j;
}

CompressionSpec CompressionSpec::from_json(const nlohmann::json& j) {
  CompressionSpec s;
  if (j.contains("quantize") && j["quantize"].is_string()) s.quantize = j["quantize"];
  s.prune = j.value("prune", 0.0);
  s.scope = j.value("prune_scope", std::string("global"));
  return s;
}

namespace {

struct Layer {
  std::string name;  // module name ("fc1", "blocks.0.attn.qkv")
  std::string kind;  // linear | conv
  torch::nn::Module* module = nullptr;
  torch::Tensor weight;    // the parameter itself (pruned in place)
  torch::Tensor weight2d;  // linear: a view [out, in] of it (the gpt's qkv [3, D, D] as [3 D, D])
  torch::Tensor bias;      // linear: [out] or undefined
};

// A gpt's tensor-parallel linear at tp = 1 (local = logical), as a plain linear layer.
Layer parallel_linear(const std::string& name, torch::nn::Module* m, const torch::Tensor& weight,
                      const torch::Tensor& bias, std::int64_t logical_in,
                      std::int64_t logical_out) {
  const torch::Tensor w2 = weight.view({-1, weight.size(-1)});
  if (w2.size(0) != logical_out || w2.size(1) != logical_in) {
    throw ConfigError(str(name, " holds a tensor-parallel shard ", weight.sizes(), " of [",
                          logical_out, ", ", logical_in,
                          "]: compressed evaluation runs on the whole logical model (--tp 1)"));
  }
  return Layer{name, "linear", m, weight, w2, bias.defined() ? bias.view({-1}) : bias};
}

std::vector<Layer> layers_of(model::Model& model) {
  std::vector<Layer> out;
  for (const auto& item : model.named_modules("", false)) {
    torch::nn::Module* m = item.value().get();
    Layer l{item.key(), "", m, {}, {}, {}};
    if (auto* lin = dynamic_cast<torch::nn::LinearImpl*>(m)) {
      l.kind = "linear";
      l.weight = lin->weight;
      l.weight2d = lin->weight;
      l.bias = lin->bias;
    } else if (auto* col = dynamic_cast<parallel::ColumnParallelLinear*>(m)) {
      l = parallel_linear(item.key(), m, col->weight, col->bias, col->options().in_features(),
                          col->options().out_features());
    } else if (auto* row = dynamic_cast<parallel::RowParallelLinear*>(m)) {
      l = parallel_linear(item.key(), m, row->weight, row->bias, row->options().in_features(),
                          row->options().out_features());
    } else if (auto* c2 = dynamic_cast<torch::nn::Conv2dImpl*>(m)) {
      l.kind = "conv";
      l.weight = c2->weight;
    } else if (auto* c1 = dynamic_cast<torch::nn::Conv1dImpl*>(m)) {
      l.kind = "conv";
      l.weight = c1->weight;
    } else if (auto* c3 = dynamic_cast<torch::nn::Conv3dImpl*>(m)) {
      l.kind = "conv";
      l.weight = c3->weight;
    } else {
      continue;
    }
    out.push_back(std::move(l));
  }
  return out;
}

// Zeroes the round(fraction * n) entries of smallest magnitude of the concatenation of
// `weights` (in that order), as torch.nn.utils.prune's L1Unstructured does on such a vector.
void prune_smallest(const std::vector<torch::Tensor>& weights, double fraction) {
  std::vector<torch::Tensor> flat;
  for (const auto& w : weights) flat.push_back(w.detach().abs().flatten());
  const torch::Tensor all = torch::cat(flat);
  // Python's round(): halves to even, which nearbyint does in the default rounding mode.
  const auto k = static_cast<std::int64_t>(std::nearbyint(fraction * all.numel()));
  if (k == 0) return;
  const torch::Tensor idx = std::get<1>(torch::topk(all, k, 0, /*largest=*/false));
  torch::Tensor mask = torch::ones_like(all);
  mask.index_fill_(0, idx, 0.0);
  std::int64_t offset = 0;
  for (const auto& w : weights) {
    const std::int64_t n = w.numel();
    w.detach().mul_(mask.narrow(0, offset, n).view(w.sizes()));
    offset += n;
  }
}

}  // namespace

CompressedModel compress_model(model::Model& model, const CompressionSpec& spec) {
  spec.validate();
  torch::NoGradGuard no_grad;
  CompressedModel out;
  std::vector<Layer> layers = layers_of(model);
  if (layers.empty()) {
    throw ConfigError(
        "the model has no linear or convolution layer hpctrain can compress (TorchScript modules "
        "are not compressed): use an mlp, cnn or gpt checkpoint");
  }
  const std::int64_t bytes_before = model_bytes(model, {});
  if (spec.prune > 0) {
    if (spec.scope == "global") {
      std::vector<torch::Tensor> ws;
      for (const auto& l : layers) ws.push_back(l.weight);
      prune_smallest(ws, spec.prune);
    } else {
      for (const auto& l : layers) prune_smallest({l.weight}, spec.prune);
    }
  }
  std::string engine;
  if (spec.quantize == "int8") {
    engine = model::select_quantized_engine();
    for (const auto& l : layers) {
      if (l.kind != "linear") continue;
      model::Int8Weight w = model::quantize_int8_per_channel(l.weight2d);
      model.set_int8_linear(l.module, std::make_shared<model::QuantizedLinear>(w, l.bias));
      out.int8.emplace(l.name, std::move(w));
    }
  }
  nlohmann::ordered_json per_layer = nlohmann::ordered_json::array();
  std::int64_t total = 0, zeros = 0;
  for (const auto& l : layers) {
    const std::int64_t n = l.weight.numel();
    const std::int64_t z = (l.weight == 0).sum().item<std::int64_t>();
    total += n;
    zeros += z;
    per_layer.push_back({{"layer", l.name},
                         {"kind", l.kind},
                         {"weights", n},
                         {"zeros", z},
                         {"sparsity", static_cast<double>(z) / static_cast<double>(n)},
                         {"int8", out.int8.count(l.name) > 0}});
  }
  out.report = spec.to_json();
  if (!engine.empty()) {
    out.report["engine"] = engine;
    out.report["convolutions"] = "float32 (only linear layers are quantized)";
    if (model.task() == Task::kLanguageModel) {
      out.report["kept_float32"] =
          "the embeddings (and the output head when it is tied to the token embedding) and the "
          "normalisations (LayerNorm, RMSNorm)";
    }
  }
  out.report["layers"] = per_layer;
  out.report["sparsity"] = static_cast<double>(zeros) / static_cast<double>(total);
  out.report["bytes_before"] = bytes_before;
  out.report["bytes_after"] = model_bytes(model, out.int8);
  return out;
}

std::vector<checkpoint::TensorRecord> compressed_records(
    model::Model& model, const nlohmann::json& compression,
    std::map<std::string, model::Int8Weight>& int8) {
  std::set<std::string> int8_layers;
  for (const auto& l : compression.value("layers", nlohmann::json::array())) {
    if (l.value("int8", false)) int8_layers.insert(l.at("layer").get<std::string>());
  }
  std::vector<checkpoint::TensorRecord> records;
  for (const Layer& l : layers_of(model)) {
    if (!int8_layers.count(l.name)) continue;
    model::Int8Weight w{torch::zeros(l.weight2d.sizes(), torch::kInt8),
                        torch::zeros({l.weight2d.size(0)}, torch::kFloat32)};
    records.push_back(
        {"int8/" + l.name + ".weight", w.values, model::ShardInfo{w.values.sizes().vec(), -1}});
    records.push_back({"int8/" + l.name + ".weight_scale", w.scales,
                       model::ShardInfo{w.scales.sizes().vec(), -1}});
    int8.emplace(l.name, std::move(w));
  }
  for (const auto& item : model.named_parameters(true)) {
    const std::string& name = item.key();
    const auto dot = name.rfind('.');
    if (dot != std::string::npos && name.substr(dot) == ".weight" &&
        int8_layers.count(name.substr(0, dot))) {
      continue;
    }
    records.push_back({"model/" + name, item.value(), model.shard_info(name)});
  }
  for (const auto& item : model.named_buffers(true)) {
    records.push_back({"model/" + item.key(), item.value(), model.shard_info(item.key())});
  }
  return records;
}

void install_int8(model::Model& model, const std::map<std::string, model::Int8Weight>& int8) {
  if (int8.empty()) return;
  model::select_quantized_engine();
  for (const Layer& l : layers_of(model)) {
    auto it = int8.find(l.name);
    if (it == int8.end()) continue;
    model.set_int8_linear(l.module, std::make_shared<model::QuantizedLinear>(it->second, l.bias));
  }
}

std::int64_t model_bytes(model::Model& model,
                         const std::map<std::string, model::Int8Weight>& int8) {
  std::int64_t bytes = 0;
  for (const auto& item : model.named_parameters(true)) {
    bytes += static_cast<std::int64_t>(item.value().nbytes());
  }
  for (const auto& item : model.named_buffers(true)) {
    bytes += static_cast<std::int64_t>(item.value().nbytes());
  }
  for (const auto& [name, w] : int8) {
    bytes += static_cast<std::int64_t>(w.values.nbytes() + w.scales.nbytes());
    bytes -= static_cast<std::int64_t>(w.values.numel()) * 4;  // the float32 weight it replaces
  }
  return bytes;
}

}  // namespace hpctrain::eval

namespace hpctrain::eval {

namespace {
std::string format_fixed(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}
}  // namespace

nlohmann::ordered_json compare_with_float32(const EvalResult& r, const EvalResult& base,
                                            double max_drop, std::string& warning) {
  nlohmann::ordered_json j{
      {"loss", base.loss}, {"accuracy", base.accuracy}, {"samples_per_s", base.samples_per_second}};
  if (base.task == Task::kLanguageModel) j["perplexity"] = base.perplexity;
  nlohmann::ordered_json drop{
      {"accuracy", base.accuracy - r.accuracy},
      {"loss", r.loss - base.loss},
      {"loss_relative", base.loss != 0 ? (r.loss - base.loss) / base.loss : 0.0}};
  if (base.task == Task::kLanguageModel) drop["perplexity"] = r.perplexity - base.perplexity;
  j["drop"] = drop;
  j["speedup"] = base.samples_per_second > 0 ? r.samples_per_second / base.samples_per_second : 0;
  const bool classification = base.task == Task::kClassification;
  const double d =
      classification ? drop["accuracy"].get<double>() : drop["loss_relative"].get<double>();
  if (d > max_drop) {
    warning =
        str("compression cost ",
            classification ? str(format_fixed(d, 4), " accuracy (", format_fixed(base.accuracy, 4),
                                 " -> ", format_fixed(r.accuracy, 4), ")")
                           : str(format_fixed(100 * d, 1), "% of the loss (",
                                 format_fixed(base.loss, 4), " -> ", format_fixed(r.loss, 4), ")"),
            ", more than --max-drop ", max_drop,
            ": try --prune-scope layer, a lower --prune sparsity, or int8 without pruning "
            "(quantization-aware training is not available in hpctrain)");
  }
  return j;
}

std::string compression_line(const nlohmann::json& c) {
  std::string what = c.value("tag", std::string());
  if (what.empty()) what = CompressionSpec::from_json(c).tag();
  std::string line = str("compressed (", what, "): ");
  if (c.contains("float32") && c.at("float32").contains("perplexity")) {  // a language model
    const auto& f = c.at("float32");
    const auto& d = f.at("drop");
    line += str("float32 loss ", format_fixed(f.value("loss", 0.0), 4), ", perplexity ",
                format_fixed(f.value("perplexity", 0.0), 3), ", token accuracy ",
                format_fixed(f.value("accuracy", 0.0), 4), "; loss drop ",
                format_fixed(d.value("loss", 0.0), 4), " (",
                format_fixed(100 * d.value("loss_relative", 0.0), 2),
                "% relative), perplexity drop ", format_fixed(d.value("perplexity", 0.0), 3),
                ", token accuracy drop ", format_fixed(d.value("accuracy", 0.0), 4), "; tokens/s x",
                format_fixed(f.value("speedup", 0.0), 2), " of float32; ");
  } else if (c.contains("float32")) {
    const auto& f = c.at("float32");
    line += str("float32 accuracy ", format_fixed(f.value("accuracy", 0.0), 4), ", loss ",
                format_fixed(f.value("loss", 0.0), 4), "; accuracy drop ",
                format_fixed(f.at("drop").value("accuracy", 0.0), 4), ", loss drop ",
                format_fixed(f.at("drop").value("loss", 0.0), 4), "; samples/s x",
                format_fixed(f.value("speedup", 0.0), 2), " of float32; ");
  } else {
    line += "no float32 comparison; ";
  }
  line += str("model ", format_bytes(c.value("bytes_before", 0.0)), " -> ",
              format_bytes(c.value("bytes_after", 0.0)));
  if (c.value("prune", 0.0) > 0) {
    line += str(", sparsity ", format_fixed(c.value("sparsity", 0.0), 3),
                " (dense kernels: the zeros save no time)");
  }
  if (c.contains("engine")) {
    line += str(", int8 on ", c.value("engine", std::string()), "; convolutions",
                c.contains("kept_float32") ? str(", ", c.value("kept_float32", std::string())) : "",
                " stay float32");
  }
  return line;
}

}  // namespace hpctrain::eval
