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
  const std::map<std::string, std::string> names = normalised_names(file, report.notes);
  auto* gpt = dynamic_cast<model::Gpt*>(&model);
  bool gpt2 = false;
  if (gpt != nullptr) {
    for (const auto& [name, original] : names) gpt2 = gpt2 || model::is_gpt2_name(name);
  }
  // The file's tensor under a name as the model (or GPT-2's table, prefix dropped) spells it.
  std::map<std::string, std::string> lookup;
  for (const auto& [name, original] : names) {
    lookup[gpt2 ? model::strip_gpt2_prefix(name) : name] = original;
  }
  auto find = [&](const std::string& name) -> const WeightsFile::Tensor* {
    auto it = lookup.find(gpt2 ? model::strip_gpt2_prefix(name) : name);
    return it == lookup.end() ? nullptr : file.find(it->second);
  };
  std::map<std::string, std::pair<std::string, Gpt2Layout>> table;  // gpt name -> GPT-2's
  bool conv1d = true;
  if (gpt2) {
    for (const auto& t : model::gpt2_tensors(gpt->options())) {
      table[t.name] = {t.gpt2_name, t.layout};
    }
    const std::int64_t d = gpt->options().width;
    if (const auto* qkv = find("h.0.attn.c_attn.weight")) {
      conv1d = !(qkv->shape == std::vector<std::int64_t>{3 * d, d});
      if (!conv1d) {
        report.notes.push_back(
            "the linear weights are stored as nn.Linear does ([out, in]), not as GPT-2's Conv1D: "
            "read without transposing");
      }
    }
  }
  report.source = str(file.description(),
                      gpt2 ? str(" (GPT-2 names", conv1d ? ", Conv1D" : "", ")") : std::string());

  std::vector<std::string> problems;
  std::vector<Step> steps;
  std::map<std::string, bool> used;  // the file's names
  const bool tied = gpt != nullptr && gpt->options().tied_embeddings;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    Step step;
    step.target = item.key();
    step.local = item.value();
    step.shard = model.shard_info(item.key());
    std::string wanted = step.target;
    if (gpt2) {
      auto it = table.find(step.target);
      if (it == table.end()) {
        problems.push_back(str(step.target, ": a parameter GPT-2's names do not cover"));
        continue;
      }
      std::tie(wanted, step.layout) = it->second;
    }
    const auto& logical = step.shard.logical_shape;
    const WeightsFile::Tensor* source = find(wanted);
    if (source == nullptr && gpt != nullptr && step.target == "lm_head.weight") {
      // A file that ties its head to wte (GPT-2's) for a gpt with its own head: start it as wte.
      source = find(gpt2 ? "transformer.wte.weight" : "wte.weight");
      if (source != nullptr) {
        report.notes.push_back(str("the file has no ", wanted,
                                   " (its head is tied to the token embedding): lm_head.weight "
                                   "starts as a copy of wte"));
      }
    }
    const std::vector<std::int64_t> expected =
        gpt2 ? model::gpt2_shape(logical, step.layout, conv1d) : logical;
    if (source == nullptr) {
      problems.push_back(str(wanted, ": missing from the file (", step.target, " needs shape ",
                             slab::shape_text(expected), ")"));
      continue;
    }
    used[source->name] = true;
    const auto& got = source->shape;
    const std::string label =
        source->name == step.target ? step.target : str(source->name, " -> ", step.target);
    if (got != expected) {
      const bool rows_only = got.size() == 2 && expected.size() == 2 && got[1] == expected[1];
      const bool vocab =
          gpt != nullptr && (step.target == "wte.weight" || step.target == "lm_head.weight");
      const bool positions = gpt != nullptr && step.target == "wpe.weight";
      if (rows_only && vocab && got[0] < expected[0]) {
        report.notes.push_back(
            str(label, ": the file's ", got[0],
                " rows are padded with zero rows to model.vocab_size = ", expected[0], " (rows ",
                got[0], "-", expected[0] - 1, " start at zero)"));
      } else if (rows_only && positions && got[0] > expected[0]) {
        report.notes.push_back(str(label, ": the first ", expected[0], " of the file's ", got[0],
                                   " positions are used (model.seq_len = ", expected[0], ")"));
      } else {
        std::string hint;
        if (rows_only && vocab) {
          hint = str(": model.vocab_size = ", expected[0], " is smaller than the file's ", got[0],
                     " rows; set model.vocab_size >= ", got[0]);
        } else if (rows_only && positions) {
          hint = str(": the file has positions for ", got[0],
                     " tokens only; set model.seq_len <= ", got[0]);
        }
        problems.push_back(str(source->name, ": shape ", slab::shape_text(got),
                               " in the file, but ", step.target, " needs ",
                               slab::shape_text(expected), hint));
        continue;
      }
    }
    if (torch::isFloatingType(step.local.scalar_type()) && !torch::isFloatingType(source->dtype)) {
      problems.push_back(str(source->name, ": dtype ", c10::toString(source->dtype),
                             " in the file, but ", step.target,
                             " is floating point (f16, bf16, f32 or f64 are converted)"));
      continue;
    }
    step.source = source->name;
    steps.push_back(std::move(step));
  }
  std::int64_t kept_buffers = 0;
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    const WeightsFile::Tensor* source = find(item.key());
    if (source == nullptr) {
      ++kept_buffers;
      continue;
    }
    used[source->name] = true;
    if (source->shape != item.value().sizes().vec()) {
      problems.push_back(str(source->name, ": shape ", slab::shape_text(source->shape),
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
    steps.push_back(std::move(step));
  }
  if (kept_buffers > 0 && !file.tensors().empty()) {
    report.notes.push_back(str(kept_buffers, " buffer(s) not in the file keep their values"));
  }
  // A tied gpt has no lm_head; a file's head must then be the embedding itself (checked below).
  const WeightsFile::Tensor* file_head = tied ? find("lm_head.weight") : nullptr;
  if (file_head != nullptr) used[file_head->name] = true;
  std::int64_t masks = 0;
  for (const auto& t : file.tensors()) {
    if (used.count(t.name) > 0) continue;
    if (gpt2 && model::is_gpt2_mask_buffer(t.name)) {
      ++masks;
      continue;
    }
    problems.push_back(str(t.name, ": in the file (shape ", slab::shape_text(t.shape),
                           "), but the model has no parameter it maps to"));
  }
  if (masks > 0) {
    report.notes.push_back(str(masks,
                               " GPT-2 attention-mask buffers (h.N.attn.bias, "
                               "masked_bias) were skipped: the gpt builds its own mask"));
  }
  if (!problems.empty()) throw CheckpointError(problems_message(key, file, problems, gpt2));

  torch::NoGradGuard no_grad;
  if (file_head != nullptr) {
    const torch::Tensor head = file.read(file_head->name);
    const auto* wte = find(gpt2 ? "transformer.wte.weight" : "wte.weight");
    const torch::Tensor embedding = wte != nullptr ? file.read(wte->name) : torch::Tensor();
    if (!embedding.defined() || !head.sizes().equals(embedding.sizes()) ||
        !torch::equal(head, embedding.to(head.scalar_type()))) {
      throw CheckpointError(str(key, ": ", file.description(), ": ", file_head->name,
                                " differs from the token embedding, but the model ties its head "
                                "to wte: set model.tied_embeddings: false to keep the file's head "
                                "(nothing was loaded)"));
    }
    report.notes.push_back(
        str(file_head->name, " equals the token embedding (tied, as the model): not read twice"));
  }
  for (Step& step : steps) {
    torch::Tensor t = file.read(step.source);
    if (gpt2) t = model::from_gpt2(t, step.layout, conv1d);
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
  return report;
}

}  // namespace hpctrain::checkpoint
