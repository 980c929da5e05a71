// CheckpointManager::load: every rank reads its own slab of each logical dataset straight from
// the files (pread at the dataset's offset, or HDF5 hyperslab reads for files other tools have
// rewritten), so any tp size reshards on load and any dp size just works.

#include <fcntl.h>

#include <map>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"
#include "manager_impl.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

// Every target that does not fit the checkpoint, one line each; empty when all fit.
std::string check_targets(const std::string& dir, const nlohmann::json& manifest,
                          std::vector<TensorRecord>& targets, int tp_size) {
  const nlohmann::json& saved = manifest.at("tensors");
  std::vector<std::string> lines;
  for (TensorRecord& t : targets) {
    normalize_shard(t);
    const auto& expected = t.shard.logical_shape;
    if (!t.local.defined()) {
      lines.push_back(str(t.name, ": the target has no tensor to load into"));
      continue;
    }
    if (!saved.contains(t.name)) {
      lines.push_back(str(t.name, ": not in the checkpoint (expected logical shape ",
                          slab::shape_text(expected), ")"));
      continue;
    }
    const nlohmann::json& s = saved.at(t.name);
    const auto shape = s.at("shape").get<std::vector<std::int64_t>>();
    if (shape != expected) {
      lines.push_back(str(t.name, ": saved logical shape ", slab::shape_text(shape), ", expected ",
                          slab::shape_text(expected)));
      continue;
    }
    if (!h5::dtype_from_name(s.at("dtype").get<std::string>())) {
      lines.push_back(str(t.name, ": saved dtype '", s.at("dtype").get<std::string>(),
                          "' is unknown to this hpctrain"));
      continue;
    }
    const int d = t.shard.split_dim;
    if (d < -1 || d >= static_cast<int>(expected.size()) ||
        t.local.sizes().vec() != parallel::local_shape({expected, d}, tp_size)) {
      lines.push_back(str(t.name, ": local tensor of shape ", t.local.sizes(),
                          " does not hold a slab of logical shape ", slab::shape_text(expected),
                          " split along dim ", d, " over ", tp_size, " tp ranks"));
    }
  }
  if (lines.empty()) return {};
  std::string message = str("checkpoint '", dir, "' does not fit the model: ", lines.size(),
                            " tensor(s) missing or mismatching:");
  for (const std::string& line : lines) message += "\n  " + line;
  message +=
      "\nUse the model configuration the checkpoint was saved with (config.yaml in the checkpoint "
      "directory), or start without it (resume = none).";
  return message;
}

// Reads this rank's slab of every target.
void read_targets(const std::string& dir, const nlohmann::json& manifest,
                  std::vector<TensorRecord>& targets, int tp_rank) {
  torch::NoGradGuard no_grad;
  const nlohmann::json& saved = manifest.at("tensors");
  std::map<std::string, std::vector<TensorRecord*>> by_file;
  for (TensorRecord& t : targets)
    by_file[saved.at(t.name).at("file").get<std::string>()].push_back(&t);
  for (auto& [file, records] : by_file) {
    const std::string path = dir + "/" + file;
    std::vector<std::string> datasets;
    for (TensorRecord* t : records) datasets.push_back(saved.at(t->name).at("dataset"));
    const auto layouts = h5::describe_datasets(path, datasets);
    io::Fd fd = io::open_regular(path);
    for (std::size_t i = 0; i < records.size(); ++i) {
      TensorRecord& t = *records[i];
      const nlohmann::json& s = saved.at(t.name);
      if (!layouts[i]) {
        throw CheckpointError(str(path, ": tensor '", t.name, "' (dataset ", datasets[i],
                                  ") is missing although the manifest lists it"));
      }
      const h5::DatasetLayout& layout = *layouts[i];
      const torch::ScalarType dtype = *h5::dtype_from_name(s.at("dtype").get<std::string>());
      if (layout.dtype != s.at("dtype").get<std::string>()) {
        // Reading the bytes as the manifest's dtype would load garbage (a NaN loss, exit 0).
        throw CheckpointError(str(path, ": tensor '", t.name, "' holds ", layout.dtype,
                                  " but the manifest says dtype ", s.at("dtype").get<std::string>(),
                                  ": the manifest was edited, or the file replaced"));
      }
      if (layout.shape != t.shard.logical_shape) {
        throw CheckpointError(str(path, ": tensor '", t.name, "' has shape ",
                                  slab::shape_text(layout.shape), " but the manifest says ",
                                  slab::shape_text(t.shard.logical_shape)));
      }
      const int d = t.shard.split_dim;
      const slab::Geometry g = slab::geometry(
          t.shard.logical_shape, d, d >= 0 ? t.local.size(d) : 0, tp_rank, c10::elementSize(dtype));
      const bool direct =
          t.local.is_cpu() && t.local.is_contiguous() && t.local.scalar_type() == dtype;
      torch::Tensor out =
          direct ? t.local : torch::empty(t.local.sizes(), torch::TensorOptions(dtype));
      if (out.numel() > 0) {
        if (g.empty()) {
          out.zero_();
        } else if (layout.raw_ok && layout.offset) {
          slab::read_slab(fd.get(), path, *layout.offset, out, g);
        } else {
          // Rewritten by another tool (chunked, compressed, another type): HDF5 converts.
          std::vector<std::int64_t> slab_shape = t.shard.logical_shape;
          if (d >= 0) slab_shape[d] = g.end - g.begin;
          torch::Tensor slab = torch::empty(slab_shape, torch::TensorOptions(dtype));
          h5::read_slab_hdf5(path, datasets[i], d, g.begin, g.end, slab);
          if (d >= 0) {
            out.narrow(d, 0, g.end - g.begin).copy_(slab);
            if (g.end - g.begin < g.local)
              out.narrow(d, g.end - g.begin, g.local - (g.end - g.begin)).zero_();
          } else {
            out.copy_(slab.view(out.sizes()));
          }
        }
      }
      if (!direct) t.local.copy_(out);
    }
  }
}

// The fields every load fills from the manifest.
void fill_loaded(Loaded& loaded, const std::string& dir, const nlohmann::json& manifest) {
  loaded.path = dir;
  loaded.manifest = manifest;
  loaded.trainer_state = manifest.value("trainer_state", nlohmann::json::object());
  loaded.step = manifest.at("step").get<std::int64_t>();
  loaded.epoch = manifest.at("epoch").get<std::int64_t>();
  loaded.consumed_samples = manifest.at("consumed_samples").get<std::int64_t>();
}

}  // namespace

Loaded load_local(const std::string& dir, std::vector<TensorRecord>& targets) {
  const nlohmann::json manifest = read_manifest(dir);
  const std::string problem = check_targets(dir, manifest, targets, 1);
  if (!problem.empty()) throw CheckpointError(problem);
  read_targets(dir, manifest, targets, 0);
  Loaded loaded;
  loaded.same_world = manifest.at("world_size").get<int>() == 1;
  loaded.same_grid = loaded.same_world;
  if (loaded.same_world && manifest.contains("rng") && manifest.at("rng").is_object()) {
    loaded.rng_state =
        h5::read_rng(dir + "/" + manifest.at("rng").value("file", std::string("rng.h5")), 0);
  }
  fill_loaded(loaded, dir, manifest);
  return loaded;
}

Loaded CheckpointManager::load(const std::string& dir, std::vector<TensorRecord>& targets) {
  Impl& m = *impl_;
  const detail::JobContext& ctx = m.ctx;
  m.ensure_comms();
  m.finish_pending();
  const std::string manifest_path = dir + "/" + kManifestFile;
  std::string text;
  if (ctx.world_rank == 0) {
    try {
      text = "ok:" + io::read_file(manifest_path);
    } catch (const CheckpointError& e) {
      text = str("error:", e.what());
    }
  }
  text = m.world->broadcast(text);
  // The same text on every rank, so the same verdict: an error is raised by every rank at once
  // and printed once (runtime/agreed_error.hpp).
  if (text.rfind("error:", 0) == 0) throw AgreedCheckpointError(text.substr(6));
  nlohmann::json manifest;
  try {
    manifest = parse_manifest(text.substr(3), manifest_path);
  } catch (const CheckpointError& e) {
    throw AgreedCheckpointError(e.what());
  }

  std::string problem = check_targets(dir, manifest, targets, ctx.tp_size);
  if (problem.empty()) {
    try {
      read_targets(dir, manifest, targets, ctx.tp_rank);
    } catch (const std::exception& e) {
      problem = str("loading checkpoint '", dir, "': ", e.what());
    }
  }
  Loaded loaded;
  loaded.same_world = manifest.at("world_size").get<int>() == ctx.world_size;
  loaded.same_grid = loaded.same_world && manifest.at("grid").at("tp").get<int>() == ctx.tp_size &&
                     manifest.at("grid").value("pp", 1) == ctx.pp_size;
  const bool has_rng = manifest.contains("rng") && manifest.at("rng").is_object();
  torch::Tensor all_rng;
  if (problem.empty() && loaded.same_world && has_rng && ctx.world_rank == 0) {
    try {
      all_rng =
          h5::read_rng(dir + "/" + manifest.at("rng").value("file", std::string("rng.h5")), -1);
    } catch (const std::exception& e) {
      problem = str("loading checkpoint '", dir, "': ", e.what());
    }
  }
  m.agree(problem);
  if (loaded.same_world && has_rng) {
    const auto bytes = manifest.at("rng").at("bytes").get<std::int64_t>();
    loaded.rng_state = torch::empty({bytes}, torch::kUInt8);
    m.world->scatter_bytes(ctx.world_rank == 0 ? all_rng.data_ptr() : nullptr,
                           loaded.rng_state.data_ptr(), static_cast<std::size_t>(bytes));
  }
  m.protect.push_back(dir);
  fill_loaded(loaded, dir, manifest);
  return loaded;
}

}  // namespace hpctrain::checkpoint
