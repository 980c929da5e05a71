// model.init_from for the llama family from Hugging Face's names (init_from_hf.hpp): the whole
// plan first (every parameter's tensors found with their shapes, every problem collected), then
// one parameter at a time read, stacked (gate_up), converted and cut into this rank's slab.

#include "init_from_hf.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "hpctrain/model/llama_hf.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

constexpr const char* kEmbedding = "model.embed_tokens.weight";
constexpr const char* kHead = "lm_head.weight";

// One parameter of this rank and the file's tensors it is made of.
struct Piece {
  std::string target;
  torch::Tensor local;
  model::ShardInfo shard;
  std::vector<std::string> sources;
};

std::string list_names(const std::vector<std::string>& names, std::size_t shown) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > shown) out += str(", ... and ", names.size() - shown, " more");
  return out;
}

std::string hf_problems_message(const std::string& key, const WeightsFile& file,
                                const std::vector<std::string>& problems) {
  constexpr std::size_t kShown = 40;
  std::string message =
      str(key, ": ", file.description(),
          " (Hugging Face names) does not fit the model: ", problems.size(), " problem(s):");
  for (std::size_t i = 0; i < problems.size() && i < kShown; ++i) message += "\n  " + problems[i];
  if (problems.size() > kShown) message += str("\n  ... and ", problems.size() - kShown, " more");
  return message +
         "\nGive the folder of this model (its config.json sets the model keys when they are "
         "left out); nothing was loaded";
}

// Checks one source tensor against the shape the parameter needs of it.
void check_source(const WeightsFile& file, const std::string& source, const std::string& target,
                  const std::vector<std::int64_t>& expected, std::vector<std::string>& problems) {
  const WeightsFile::Tensor* t = file.find(source);
  if (t == nullptr) {
    problems.push_back(str(source, ": missing from the file (", target, " needs shape ",
                           slab::shape_text(expected), ")"));
  } else if (t->shape != expected) {
    problems.push_back(str(source, ": shape ", slab::shape_text(t->shape), " in the file, but ",
                           target, " needs ", slab::shape_text(expected)));
  } else if (!torch::isFloatingType(t->dtype)) {
    problems.push_back(str(source, ": dtype ", c10::toString(t->dtype), " in the file, but ",
                           target, " is floating point (f16, bf16, f32 or f64 are converted)"));
  }
}

// The tied head: a file's lm_head, if any, must be the embedding itself.
void check_tied_head(const WeightsFile& file, const std::string& key, InitFromReport& report) {
  if (file.find(kHead) == nullptr) return;
  const torch::Tensor head = file.read(kHead);
  const torch::Tensor embedding = file.find(kEmbedding) ? file.read(kEmbedding) : torch::Tensor();
  if (!embedding.defined() || !head.sizes().equals(embedding.sizes()) ||
      !torch::equal(head, embedding.to(head.scalar_type()))) {
    throw CheckpointError(str(key, ": ", file.description(), ": ", kHead,
                              " differs from the token embedding, but the model ties its head to "
                              "it: set model.tied_embeddings: false to keep the file's head "
                              "(nothing was loaded)"));
  }
  report.notes.push_back(str(kHead, " equals the token embedding (tied, as the model)"));
}

}  // namespace

bool has_hf_llama_names(const WeightsFile& file) {
  for (const auto& t : file.tensors()) {
    if (t.name == kEmbedding || t.name.rfind("model.layers.", 0) == 0) return true;
  }
  return false;
}

InitFromReport init_llama_from_hf(model::Model& model, const model::LlamaOptions& options,
                                  const WeightsFile& file, int tp_rank, int tp_size,
                                  const std::string& key) {
  InitFromReport report;
  report.source = str(file.description(), " (Hugging Face names)");
  report.notes = file.notes();
  std::map<std::string, std::vector<std::string>> table;
  std::set<std::string> expected;  // every tensor of the whole model (all pipeline stages)
  for (const auto& t : model::llama_hf_tensors(options)) {
    table[t.name] = t.hf_names;
    expected.insert(t.hf_names.begin(), t.hf_names.end());
  }
  std::vector<std::string> problems;
  std::vector<Piece> pieces;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    Piece piece{item.key(), item.value(), model.shard_info(item.key()), {}};
    auto it = table.find(piece.target);
    if (it == table.end()) {
      problems.push_back(str(piece.target, ": a parameter Hugging Face's names do not cover"));
      continue;
    }
    piece.sources = it->second;
    if (piece.target == "lm_head.weight" && file.find(kHead) == nullptr &&
        file.find(kEmbedding) != nullptr) {
      // A file that ties its head for a model with its own: start the head as the embedding.
      piece.sources = {kEmbedding};
      report.notes.push_back(str("the file has no ", kHead,
                                 " (its head is tied to the token embedding): lm_head.weight "
                                 "starts as a copy of it"));
    }
    std::vector<std::int64_t> shape = piece.shard.logical_shape;
    if (piece.sources.size() > 1) shape.erase(shape.begin());  // stacked: one slice each
    for (const auto& source : piece.sources) {
      check_source(file, source, piece.target, shape, problems);
    }
    pieces.push_back(std::move(piece));
  }
  // Tensors of the whole model that this rank's stages do not hold must still be in the file.
  for (const auto& name : expected) {
    if (name == kHead && file.find(kEmbedding) != nullptr) continue;  // the copy above
    if (file.find(name) == nullptr &&
        std::none_of(pieces.begin(), pieces.end(), [&](const Piece& p) {
          return std::find(p.sources.begin(), p.sources.end(), name) != p.sources.end();
        })) {
      problems.push_back(str(name,
                             ": missing from the file (a tensor of another pipeline "
                             "stage)"));
    }
  }
  std::vector<std::string> unused;
  for (const auto& t : file.tensors()) {
    const bool tied_head = options.tied_embeddings && t.name == kHead;
    if (expected.count(t.name) == 0 && !tied_head) unused.push_back(t.name);
  }
  if (!problems.empty()) throw CheckpointError(hf_problems_message(key, file, problems));
  if (!unused.empty()) {
    report.warnings.push_back(str(file.description(), ": ", unused.size(),
                                  " tensor(s) of the file are used by no parameter and were not "
                                  "read: ",
                                  list_names(unused, 12)));
  }
  torch::NoGradGuard no_grad;
  if (options.tied_embeddings) check_tied_head(file, key, report);
  for (Piece& piece : pieces) {
    std::vector<torch::Tensor> parts;
    for (const auto& source : piece.sources) {
      parts.push_back(file.read(source).to(piece.local.scalar_type()));
    }
    const torch::Tensor logical = parts.size() == 1 ? parts.front() : torch::stack(parts);
    const torch::Tensor slab = parallel::shard_of(
        logical, {piece.shard.logical_shape, piece.shard.split_dim}, tp_rank, tp_size);
    if (!slab.sizes().equals(piece.local.sizes())) {
      throw CheckpointError(str(key, ": ", piece.target, ": slab ", slab.sizes(),
                                " does not fit the local tensor ", piece.local.sizes(),
                                " (internal error)"));
    }
    piece.local.copy_(slab);
    ++report.parameters;
  }
  return report;
}

}  // namespace hpctrain::checkpoint
