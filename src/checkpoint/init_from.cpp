// model.init_from: a plan first (every parameter's source tensor, layout and shape, every problem
// collected), then, only when the whole plan fits, one tensor at a time read, reshaped,
// converted and sliced into this rank's parameter.

#include "hpctrain/checkpoint/init_from.hpp"

#include <map>
#include <optional>

#include "hpctrain/checkpoint/weights_file.hpp"
#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/gpt2_names.hpp"
#include "hpctrain/model/llama.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "init_from_hf.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

using model::Gpt2Layout;

// How one parameter or buffer is filled.
struct Step {
  std::string target;  // the model's name
  torch::Tensor local;
  model::ShardInfo shard;
  std::string source;  // the file's name
  Gpt2Layout layout = Gpt2Layout::kSame;
  bool buffer = false;
};

// The file's names with a prefix every one of them carries dropped (DDP's "module.",
// torch.compile's "_orig_mod."): normalised name -> the file's name.
std::map<std::string, std::string> normalised_names(const WeightsFile& file,
                                                    std::vector<std::string>& notes) {
  std::vector<std::string> names;
  for (const auto& t : file.tensors()) names.push_back(t.name);
  std::vector<std::string> stripped = names;
  for (const std::string prefix : {"module.", "_orig_mod."}) {
    bool all = !stripped.empty();
    for (const auto& n : stripped) all = all && n.rfind(prefix, 0) == 0;
    if (!all) continue;
    for (auto& n : stripped) n = n.substr(prefix.size());
    notes.push_back(str("the prefix '", prefix, "' of every name in the file was dropped"));
  }
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < names.size(); ++i) out[stripped[i]] = names[i];
  return out;
}

std::string problems_message(const std::string& key, const WeightsFile& file,
                             const std::vector<std::string>& problems, bool gpt2) {
  constexpr std::size_t kShown = 40;
  std::string message = str(key, ": ", file.description(), gpt2 ? " (GPT-2 names)" : "",
                            " does not fit the model: ", problems.size(), " problem(s):");
  for (std::size_t i = 0; i < problems.size() && i < kShown; ++i) message += "\n  " + problems[i];
  if (problems.size() > kShown) message += str("\n  ... and ", problems.size() - kShown, " more");
  message +=
      "\nGive weights of this model's architecture, or set the model section to the file's "
      "(layers, width, heads, mlp_ratio, vocab_size, seq_len, tied_embeddings); nothing was "
      "loaded";
  return message;
}

// The file as the model looks it up: under the model's names, or through GPT-2's table.
struct FileView {
  explicit FileView(const WeightsFile& f) : file(f) {}

  const WeightsFile& file;
  const model::Gpt* gpt = nullptr;  // null for every other model
  bool gpt2 = false;                // the file uses GPT-2's names (a gpt only)
  bool conv1d = true;               // GPT-2's linear weights stored as Conv1D ([in, out])
  // The file's tensor under a name as the model (or GPT-2's table, prefix dropped) spells it.
  std::map<std::string, std::string> lookup;
  std::map<std::string, std::pair<std::string, Gpt2Layout>> table;  // gpt name -> GPT-2's

  const WeightsFile::Tensor* find(const std::string& name) const {
    auto it = lookup.find(gpt2 ? model::strip_gpt2_prefix(name) : name);
    return it == lookup.end() ? nullptr : file.find(it->second);
  }
};

// What the plan collects: the steps to run, the problems that stop it, the file's names used.
struct Plan {
  std::vector<std::string> problems;
  std::vector<Step> steps;
  std::map<std::string, bool> used;  // the file's names
};

FileView view_file(const WeightsFile& file, model::Model& model, InitFromReport& report) {
  FileView view(file);
  const std::map<std::string, std::string> names = normalised_names(file, report.notes);
  view.gpt = dynamic_cast<model::Gpt*>(&model);
  if (view.gpt != nullptr) {
    for (const auto& [name, original] : names) view.gpt2 = view.gpt2 || model::is_gpt2_name(name);
  }
  for (const auto& [name, original] : names) {
    view.lookup[view.gpt2 ? model::strip_gpt2_prefix(name) : name] = original;
  }
  if (view.gpt2) {
    for (const auto& t : model::gpt2_tensors(view.gpt->options())) {
      view.table[t.name] = {t.gpt2_name, t.layout};
    }
    const std::int64_t d = view.gpt->options().width;
    if (const auto* qkv = view.find("h.0.attn.c_attn.weight")) {
      view.conv1d = !(qkv->shape == std::vector<std::int64_t>{3 * d, d});
      if (!view.conv1d) {
        report.notes.push_back(
            "the linear weights are stored as nn.Linear does ([out, in]), not as GPT-2's Conv1D: "
            "read without transposing");
      }
    }
  }
  report.source =
      str(file.description(),
          view.gpt2 ? str(" (GPT-2 names", view.conv1d ? ", Conv1D" : "", ")") : std::string());
  return view;
}

// Whether the file's tensor `got` fits a parameter of shape `expected`: equal, or a vocabulary
// padded with zero rows, or positions cut to seq_len (both noted). A misfit is a problem.
bool shape_fits(const FileView& view, const Step& step, const WeightsFile::Tensor& source,
                const std::vector<std::int64_t>& expected, InitFromReport& report, Plan& plan) {
  const auto& got = source.shape;
  if (got == expected) return true;
  const std::string label =
      source.name == step.target ? step.target : str(source.name, " -> ", step.target);
  const bool rows_only = got.size() == 2 && expected.size() == 2 && got[1] == expected[1];
  const bool vocab =
      view.gpt != nullptr && (step.target == "wte.weight" || step.target == "lm_head.weight");
  const bool positions = view.gpt != nullptr && step.target == "wpe.weight";
  if (rows_only && vocab && got[0] < expected[0]) {
    report.notes.push_back(str(
        label, ": the file's ", got[0], " rows are padded with zero rows to model.vocab_size = ",
        expected[0], " (rows ", got[0], "-", expected[0] - 1, " start at zero)"));
    return true;
  }
  if (rows_only && positions && got[0] > expected[0]) {
    report.notes.push_back(str(label, ": the first ", expected[0], " of the file's ", got[0],
                               " positions are used (model.seq_len = ", expected[0], ")"));
    return true;
  }
  std::string hint;
  if (rows_only && vocab) {
    hint = str(": model.vocab_size = ", expected[0], " is smaller than the file's ", got[0],
               " rows; set model.vocab_size >= ", got[0]);
  } else if (rows_only && positions) {
    hint =
        str(": the file has positions for ", got[0], " tokens only; set model.seq_len <= ", got[0]);
  }
  plan.problems.push_back(str(source.name, ": shape ", slab::shape_text(got), " in the file, but ",
                              step.target, " needs ", slab::shape_text(expected), hint));
  return false;
}

// One step per parameter, each with its source tensor found and checked.
void plan_parameters(model::Model& model, const FileView& view, InitFromReport& report,
                     Plan& plan) {
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    Step step;
    step.target = item.key();
    step.local = item.value();
    step.shard = model.shard_info(item.key());
    std::string wanted = step.target;
    if (view.gpt2) {
      auto it = view.table.find(step.target);
      if (it == view.table.end()) {
        plan.problems.push_back(str(step.target, ": a parameter GPT-2's names do not cover"));
        continue;
      }
      std::tie(wanted, step.layout) = it->second;
    }
    const auto& logical = step.shard.logical_shape;
    const WeightsFile::Tensor* source = view.find(wanted);
    if (source == nullptr && view.gpt != nullptr && step.target == "lm_head.weight") {
      // A file that ties its head to wte (GPT-2's) for a gpt with its own head: start it as wte.
      source = view.find(view.gpt2 ? "transformer.wte.weight" : "wte.weight");
      if (source != nullptr) {
        report.notes.push_back(str("the file has no ", wanted,
                                   " (its head is tied to the token embedding): lm_head.weight "
                                   "starts as a copy of wte"));
      }
    }
    const std::vector<std::int64_t> expected =
        view.gpt2 ? model::gpt2_shape(logical, step.layout, view.conv1d) : logical;
    if (source == nullptr) {
      plan.problems.push_back(str(wanted, ": missing from the file (", step.target, " needs shape ",
                                  slab::shape_text(expected), ")"));
      continue;
    }
    plan.used[source->name] = true;
    if (!shape_fits(view, step, *source, expected, report, plan)) continue;
    if (torch::isFloatingType(step.local.scalar_type()) && !torch::isFloatingType(source->dtype)) {
      plan.problems.push_back(str(source->name, ": dtype ", c10::toString(source->dtype),
                                  " in the file, but ", step.target,
                                  " is floating point (f16, bf16, f32 or f64 are converted)"));
      continue;
    }
    step.source = source->name;
    plan.steps.push_back(std::move(step));
  }
}

// One step per buffer the file holds; the others keep their values.
void plan_buffers(model::Model& model, const FileView& view, InitFromReport& report, Plan& plan) {
  std::int64_t kept_buffers = 0;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    const WeightsFile::Tensor* source = view.find(item.key());
    if (source == nullptr) {
      ++kept_buffers;
      continue;
    }
    plan.used[source->name] = true;
    if (source->shape != item.value().sizes().vec()) {
      plan.problems.push_back(str(source->name, ": shape ", slab::shape_text(source->shape),
                                  " in the file, but buffer ", item.key(), " has ",
                                  slab::shape_text(item.value().sizes().vec())));
      continue;
    }
    Step step;
    step.target = item.key();
    step.local = item.value();
    step.shard = model.shard_info(item.key());
    step.source = source->name;
    step.buffer = true;
    plan.steps.push_back(std::move(step));
  }
  if (kept_buffers > 0 && !view.file.tensors().empty()) {
    report.notes.push_back(str(kept_buffers, " buffer(s) not in the file keep their values"));
  }
}

// Every tensor of the file must map to something (GPT-2's mask buffers are skipped).
void plan_unused(const FileView& view, InitFromReport& report, Plan& plan) {
  std::int64_t masks = 0;
  for (const auto& t : view.file.tensors()) {
    if (plan.used.count(t.name) > 0) continue;
    if (view.gpt2 && model::is_gpt2_mask_buffer(t.name)) {
      ++masks;
      continue;
    }
    plan.problems.push_back(str(t.name, ": in the file (shape ", slab::shape_text(t.shape),
                                "), but the model has no parameter it maps to"));
  }
  if (masks > 0) {
    report.notes.push_back(str(masks,
                               " GPT-2 attention-mask buffers (h.N.attn.bias, "
                               "masked_bias) were skipped: the gpt builds its own mask"));
  }
}

// A tied gpt given a file with its own head: the head must equal the embedding.
void check_head_is_embedding(const FileView& view, const WeightsFile::Tensor& file_head,
                             const std::string& key, InitFromReport& report) {
  const WeightsFile& file = view.file;
  const torch::Tensor head = file.read(file_head.name);
  const auto* wte = view.find(view.gpt2 ? "transformer.wte.weight" : "wte.weight");
  const torch::Tensor embedding = wte != nullptr ? file.read(wte->name) : torch::Tensor();
  if (!embedding.defined() || !head.sizes().equals(embedding.sizes()) ||
      !torch::equal(head, embedding.to(head.scalar_type()))) {
    throw CheckpointError(str(key, ": ", file.description(), ": ", file_head.name,
                              " differs from the token embedding, but the model ties its head "
                              "to wte: set model.tied_embeddings: false to keep the file's head "
                              "(nothing was loaded)"));
  }
  report.notes.push_back(
      str(file_head.name, " equals the token embedding (tied, as the model): not read twice"));
}

// Reads, reshapes, converts and slices each step's tensor into this rank's parameter or buffer.
void run_steps(const FileView& view, std::vector<Step>& steps, int tp_rank, int tp_size,
               const std::string& key, InitFromReport& report) {
  for (Step& step : steps) {
    torch::Tensor t = view.file.read(step.source);
    if (view.gpt2) t = model::from_gpt2(t, step.layout, view.conv1d);
    const auto& logical = step.shard.logical_shape;
    if (!step.buffer && t.dim() == 2 && t.size(0) != logical[0]) {
      t = t.size(0) < logical[0]
              ? torch::cat({t, torch::zeros({logical[0] - t.size(0), t.size(1)}, t.options())})
              : t.narrow(0, 0, logical[0]).contiguous();
    }
    t = t.to(step.local.scalar_type());
    torch::Tensor slab =
        step.buffer ? t : parallel::shard_of(t, {logical, step.shard.split_dim}, tp_rank, tp_size);
    if (!slab.sizes().equals(step.local.sizes())) {
      throw CheckpointError(str(key, ": ", step.target, ": slab ", slab.sizes(),
                                " does not fit the local tensor ", step.local.sizes(),
                                " (internal error)"));
    }
    step.local.copy_(slab);
    ++(step.buffer ? report.buffers : report.parameters);
  }
}

}  // namespace

InitFromReport init_model_from(model::Model& model, const std::string& path, int tp_rank,
                               int tp_size, const std::string& key) {
  std::optional<WeightsFile> opened;
  try {
    opened = WeightsFile::open(path);
  } catch (const CheckpointError& e) {
    throw CheckpointError(str(key, ": ", e.what()));
  }
  const WeightsFile& file = *opened;
  if (auto* llama = dynamic_cast<model::Llama*>(&model); llama && has_hf_llama_names(file)) {
    return init_llama_from_hf(model, llama->options(), file, tp_rank, tp_size, key);
  }
  InitFromReport report;
  report.notes = file.notes();
  const FileView view = view_file(file, model, report);
  Plan plan;
  plan_parameters(model, view, report, plan);
  plan_buffers(model, view, report, plan);
  // A tied gpt has no lm_head; a file's head must then be the embedding itself (checked below).
  const bool tied = view.gpt != nullptr && view.gpt->options().tied_embeddings;
  const WeightsFile::Tensor* file_head = tied ? view.find("lm_head.weight") : nullptr;
  if (file_head != nullptr) plan.used[file_head->name] = true;
  plan_unused(view, report, plan);
  if (!plan.problems.empty()) {
    throw CheckpointError(problems_message(key, file, plan.problems, view.gpt2));
  }

  torch::NoGradGuard no_grad;
  if (file_head != nullptr) check_head_is_embedding(view, *file_head, key, report);
  run_steps(view, plan.steps, tp_rank, tp_size, key, report);
  return report;
}

}  // namespace hpctrain::checkpoint
