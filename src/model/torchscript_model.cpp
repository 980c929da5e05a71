#include "hpctrain/model/torchscript_model.hpp"

#include <ATen/record_function.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>
#include <torch/csrc/profiler/util.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "hpctrain/model/task_loss.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {
namespace {

std::string shape_of(const torch::Tensor& t) {
  std::string out = "[";
  for (std::int64_t d = 0; d < t.dim(); ++d) out += (d ? ", " : "") + std::to_string(t.size(d));
  return out + "] " + std::string(c10::toString(t.scalar_type()));
}

std::string schema_text(const c10::FunctionSchema& schema) {
  std::ostringstream out;
  out << schema;
  return out.str();
}

// The operations whose last-but-some argument is the training flag, and its position.
const std::map<std::string, std::size_t>& mode_ops() {
  static const std::map<std::string, std::size_t> ops = {
      {"aten::dropout", 2},          {"aten::dropout_", 2},      {"aten::feature_dropout", 2},
      {"aten::feature_dropout_", 2}, {"aten::alpha_dropout", 2}, {"aten::alpha_dropout_", 2},
      {"aten::batch_norm", 5},       {"aten::instance_norm", 5},
  };
  return ops;
}

// In a scripted module the flag is read from `self.training` at run time; a traced module records
// the value it had while tracing as a constant, so train()/eval() no longer reach it.
std::vector<std::string> find_frozen_mode_ops(torch::jit::Module& module) {
  std::vector<std::string> found;
  auto graph = module.get_method("forward").graph()->copy();
  torch::jit::Inline(*graph);
  torch::jit::DepthFirstGraphNodeIterator it(graph);
  for (torch::jit::Node* node = it.next(); node != nullptr; node = it.next()) {
    auto op = mode_ops().find(node->kind().toQualString());
    if (op == mode_ops().end() || node->inputs().size() <= op->second) continue;
    torch::jit::Value* flag = node->input(op->second);
    if (flag->node()->kind() != c10::prim::Constant) continue;
    auto value = torch::jit::toIValue(flag);
    found.push_back(str(
        op->first,
        "(training=", value && value->isBool() ? (value->toBool() ? "True" : "False") : "?", ")"));
  }
  return found;
}

// Matrix products and convolutions: where the FLOPs of these models are. LibTorch's estimator
// also counts element-wise aten::add and aten::mul; they are left out, as the built-in models'
// counts leave out activations.
bool counted_op(const std::string& name) {
  static const std::set<std::string> ops = {"aten::mm",      "aten::addmm",  "aten::bmm",
                                            "aten::baddbmm", "aten::conv1d", "aten::conv2d",
                                            "aten::conv3d"};
  return ops.count(name) > 0;
}

thread_local double t_counted_flops = 0;

std::unique_ptr<at::ObserverContext> count_op(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  if (counted_op(name)) {
    t_counted_flops += static_cast<double>(
        torch::profiler::impl::computeFlops(name, torch::profiler::impl::saveExtraArgs(fn)));
  }
  return nullptr;
}

}  // namespace

double count_forward_flops(const std::function<void()>& fn) {
  t_counted_flops = 0;
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(count_op).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    fn();
  } catch (...) {
    at::removeCallback(handle);
    throw;
  }
  at::removeCallback(handle);
  return t_counted_flops;
}

TorchScriptOptions read_torchscript_options(ConfigSection& section, int tp_size) {
  TorchScriptOptions o;
  o.file = section.get<std::string>("file", "");
  const std::string task = section.get<std::string>("task", "classification");
  o.flops_per_sample = section.get<double>("flops_per_sample", 0.0);
  if (o.file.empty()) {
    section.fail("file",
                 "a torchscript model needs the module file: save one in Python with "
                 "torch.jit.script(model).save(PATH) and set model.file=PATH");
  }
  section.check_choice("task", task, task_names());
  o.task = *task_from_name(task);
  if (o.flops_per_sample < 0) section.fail("flops_per_sample", "must be >= 0 (0: count them)");
  if (tp_size > 1) {
    section.fail("name", str("a torchscript model is data parallel only (hpctrain cannot split a "
                             "module it did not build across ranks); parallel.tp = ",
                             tp_size, ": set parallel.tp=1"));
  }
  // stat(2) only: torch::jit::load of a FIFO would block in open(2).
  const runtime::PathType type = runtime::path_type(o.file);
  if (type == runtime::PathType::kMissing) {
    section.fail("file",
                 "no such file: check the path (relative paths are taken from the "
                 "working directory)");
  }
  if (type != runtime::PathType::kRegular) {
    section.fail("file", str("is not a regular file (", runtime::path_type_name(type),
                             "): point model.file at the saved module (.pt)"));
  }
  return o;
}

TorchScriptModel::TorchScriptModel(const TorchScriptOptions& options) : options_(options) {
  const std::string where = str("model.file = ", options_.file);
  runtime::require_regular_file(options_.file, runtime::FileKind::kConfig, "model.file",
                                "point model.file at the saved module (.pt)");
  try {
    module_ = torch::jit::load(options_.file, torch::kCPU);
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    if (why.size() > 300) why = why.substr(0, 300) + "...";
    throw ConfigError(str(where, " is not a TorchScript module (torch::jit::load: ", why,
                          "): save one in Python with torch.jit.script(model).save(PATH)"));
  }
  auto method = module_.find_method("forward");
  if (!method) {
    throw ConfigError(str(where,
                          ": the module has no forward method: script a torch.nn.Module "
                          "whose forward takes the batch's inputs"));
  }
  const c10::FunctionSchema& schema = method->function().getSchema();
  const auto& args = schema.arguments();  // args[0] is self
  bool fits = args.size() >= 2 && c10::TensorType::get()->isSubtypeOf(*args[1].type());
  for (std::size_t i = 2; fits && i < args.size(); ++i) fits = args[i].default_value().has_value();
  fits = fits && schema.returns().size() == 1 &&
         schema.returns()[0].type()->isSubtypeOf(*c10::TensorType::get());
  if (!fits) {
    throw ConfigError(str(where, ": forward is ", schema_text(schema),
                          " but hpctrain calls forward(inputs: Tensor) -> Tensor (the batch's "
                          "inputs in, ",
                          options_.task == Task::kRegression      ? "predictions"
                          : options_.task == Task::kLanguageModel ? "logits [B, T, V]"
                                                                  : "logits [B, C]",
                          " out): change the module's forward to that signature"));
  }
  frozen_ops_ = find_frozen_mode_ops(module_);
  register_tensors();
  module_.train(is_training());
}

void TorchScriptModel::register_tensors() {
  // torch::nn::Module names may not contain dots: mirror the module tree with empty holder
  // modules so that this model's named_parameters() are the TorchScript names. The tensors are
  // the module's own (the same TensorImpl), so FlatParameters' set_data re-points the scripted
  // module's slots into the flat buffer too, and gradients of its forward land there.
  std::map<std::string, std::shared_ptr<torch::nn::Module>> holders;
  auto holder_of = [&](const std::string& name, std::string& leaf) -> torch::nn::Module& {
    const auto dot = name.rfind('.');
    leaf = dot == std::string::npos ? name : name.substr(dot + 1);
    if (dot == std::string::npos) return *this;
    torch::nn::Module* parent = this;
    std::string path;
    std::size_t start = 0;
    while (start < dot) {
      std::size_t next = name.find('.', start);
      if (next == std::string::npos || next > dot) next = dot;
      const std::string part = name.substr(start, next - start);
      path += (path.empty() ? "" : ".") + part;
      auto it = holders.find(path);
      if (it == holders.end()) {
        auto holder = std::make_shared<torch::nn::Module>();
        parent->register_module(part, holder);
        it = holders.emplace(path, holder).first;
      }
      parent = it->second.get();
      start = next + 1;
    }
    return *parent;
  };
  std::set<const c10::TensorImpl*> seen;
  for (const auto& item : module_.named_parameters(/*recurse=*/true)) {
    if (!seen.insert(item.value.unsafeGetTensorImpl()).second) {
      throw ConfigError(str("model.file = ", options_.file, ": parameter ", item.name,
                            " is shared with another parameter (tied weights): hpctrain's flat "
                            "parameter buffer needs each parameter once; untie them"));
    }
    std::string leaf;
    torch::nn::Module& holder = holder_of(item.name, leaf);
    if (item.value.requires_grad()) {
      holder.register_parameter(leaf, item.value, /*requires_grad=*/true);
    } else {
      // A frozen parameter is state, not something to train: kept (and checkpointed) as a buffer.
      holder.register_buffer(leaf, item.value);
    }
  }
  for (const auto& item : module_.named_buffers(/*recurse=*/true)) {
    if (!seen.insert(item.value.unsafeGetTensorImpl()).second) continue;
    std::string leaf;
    holder_of(item.name, leaf).register_buffer(leaf, item.value);
  }
  if (named_parameters(true).size() == 0) {
    throw ConfigError(str("model.file = ", options_.file,
                          ": the module has no parameter that requires a gradient: nothing to "
                          "train"));
  }
}

torch::Tensor TorchScriptModel::forward(const torch::Tensor& inputs) {
  return module_.forward({inputs}).toTensor();
}

LossOutput TorchScriptModel::loss(const torch::Tensor& outputs, const torch::Tensor& targets) {
  return task_loss(options_.task, outputs, targets);
}

double TorchScriptModel::forward_flops_per_sample() const {
  return options_.flops_per_sample > 0 ? options_.flops_per_sample : counted_flops_per_sample_;
}

std::string TorchScriptModel::flops_source() const {
  if (options_.flops_per_sample > 0) return "model.flops_per_sample";
  return counted_flops_per_sample_ > 0 ? "profiler (matrix products and convolutions)"
                                       : "not counted";
}

void TorchScriptModel::check_batch(const torch::Tensor& inputs, const torch::Tensor& targets,
                                   std::int64_t num_classes, const std::string& where) {
  const std::string model_where = str("model.file = ", options_.file);
  torch::Tensor outputs;
  const bool was_training = is_training();
  // Evaluation mode: the check neither draws dropout randomness nor moves BatchNorm statistics.
  train(false);
  try {
    torch::NoGradGuard no_grad;
    const double flops = count_forward_flops([&] { outputs = forward(inputs); });
    if (counted_flops_per_sample_ == 0 && inputs.size(0) > 0) {
      counted_flops_per_sample_ = flops / static_cast<double>(inputs.size(0));
    }
  } catch (const Error&) {
    train(was_training);
    throw;
  } catch (const std::exception& e) {
    train(was_training);
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    std::string why = c10_error ? c10_error->what_without_backtrace() : e.what();
    if (why.size() > 600) why = why.substr(0, 600) + "...";
    throw ConfigError(str(model_where, ": forward failed on the inputs of ", where, " (shape ",
                          shape_of(inputs), "): ", why,
                          ": the module must take a batch shaped like the data's /inputs"));
  }
  train(was_training);
  const std::int64_t batch = inputs.size(0);
  std::string expected;
  bool ok = outputs.defined() && outputs.dim() > 0 && outputs.size(0) == batch;
  if (options_.task == Task::kClassification) {
    expected = str("logits [", batch, ", C] with C >= ", num_classes, " classes");
    ok = ok && outputs.dim() == 2 && outputs.size(1) >= num_classes;
  } else if (options_.task == Task::kLanguageModel) {
    expected = str("logits [", batch, ", ", inputs.size(1), ", V] with V >= ", num_classes,
                   " (the vocabulary)");
    ok = ok && outputs.dim() == 3 && outputs.size(1) == inputs.size(1) &&
         outputs.size(2) >= num_classes;
  } else {
    expected = str("predictions shaped like the targets ", shape_of(targets));
    ok = ok && outputs.sizes() == targets.sizes();
  }
  if (ok && !outputs.is_floating_point()) ok = false;
  if (!ok) {
    throw ConfigError(str(model_where, ": forward(inputs ", shape_of(inputs), ") from ", where,
                          " returned ", outputs.defined() ? shape_of(outputs) : "nothing",
                          ", but a ", task_name(options_.task), " model returns ", expected,
                          ": fix the module's output, model.task, or the data"));
  }
}

void TorchScriptModel::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

// The scripted module moves its tensors with set_data, so the tensors this model registered (the
// same ones) follow, and so do their flat-buffer views' owners.
void TorchScriptModel::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  module_.to(device, dtype, non_blocking);
}
void TorchScriptModel::to(torch::Dtype dtype, bool non_blocking) {
  module_.to(dtype, non_blocking);
}
void TorchScriptModel::to(torch::Device device, bool non_blocking) {
  module_.to(device, non_blocking);
}

std::shared_ptr<Model> make_torchscript(ConfigSection& section, const ModelContext& ctx) {
  auto options = read_torchscript_options(section, ctx.tp_size);
  auto model = std::make_shared<TorchScriptModel>(options);
  if (!model->frozen_mode_ops().empty()) {
    std::string ops;
    for (const auto& op : model->frozen_mode_ops()) ops += (ops.empty() ? "" : ", ") + op;
    log::warn(str("model.file = ", options.file, ": forward has ", ops,
                  " fixed at a constant (a traced module?): train() and eval() do not reach "
                  "them, so dropout/BatchNorm behave the same in training and evaluation. Save "
                  "the module with torch.jit.script instead of torch.jit.trace"));
  }
  return model;
}

}  // namespace hpctrain::model
