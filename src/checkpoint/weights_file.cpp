// The three sources of pretrained weights behind one list of named tensors (weights_file.hpp).

#include "hpctrain/checkpoint/weights_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/safetensors.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "torch_zip.hpp"

namespace hpctrain::checkpoint {
namespace {

namespace fs = std::filesystem;

// What the first bytes of a regular file say it is.
enum class Magic { kZip, kLegacyTorch, kOther };

Magic sniff(const std::string& path) {
  io::Fd fd = io::open_file(path, O_RDONLY);
  unsigned char b[4] = {0, 0, 0, 0};
  const ssize_t n = ::pread(fd.get(), b, sizeof b, 0);
  if (n == 4 && b[0] == 'P' && b[1] == 'K' && b[2] == 3 && b[3] == 4) return Magic::kZip;
  // torch.save's format before PyTorch 1.6: a pickle (protocol 2) of a long magic number.
  if (n == 4 && b[0] == 0x80 && b[1] == 0x02 && b[2] == 0x8a && b[3] == 0x0a) {
    return Magic::kLegacyTorch;
  }
  return Magic::kOther;
}

}  // namespace

struct WeightsFile::Impl {
  Format format = Format::kSafetensors;
  std::string description;
  std::vector<Tensor> tensors;
  std::map<std::string, std::size_t> index;
  std::vector<std::string> notes;
  // One of these, by format (safetensors: one file, or the shards of an index, with each
  // tensor's shard).
  std::vector<SafetensorsFile> safetensors;
  std::vector<std::size_t> shard;
  std::optional<torchzip::TorchZipFile> torch_file;
  std::string checkpoint_dir;
  nlohmann::json manifest;  // the checkpoint's
};

namespace {

// Opens the shards model.safetensors.index.json lists: its weight_map names each tensor's file
// (inside the folder); every shard must hold exactly the tensors the index gives it.
struct ShardedSet {
  std::vector<SafetensorsFile> files;
  std::vector<WeightsFile::Tensor> tensors;
  std::vector<std::size_t> shard;
  std::string description;
};

nlohmann::json read_index(const std::string& path) {
  runtime::require_regular_file(path, runtime::FileKind::kCheckpoint, "safetensors index",
                                "give a Hugging Face model folder");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw CheckpointError(str("safetensors index '", path, "' is not valid JSON (byte ", e.byte,
                              "): download or write it again"));
  }
}

ShardedSet open_sharded(const std::string& dir) {
  ShardedSet impl;
  const std::string index_path = dir + "/" + kSafetensorsIndex;
  const nlohmann::json index = read_index(index_path);
  if (!index.contains("weight_map") || !index.at("weight_map").is_object()) {
    throw CheckpointError(str("safetensors index '", index_path,
                              "' has no \"weight_map\" object (tensor name -> shard file)"));
  }
  std::map<std::string, std::size_t> files;  // shard file -> its index in impl.safetensors
  std::map<std::string, std::string> listed;
  for (const auto& [name, value] : index.at("weight_map").items()) {
    if (!value.is_string() || value.get<std::string>().empty() ||
        value.get<std::string>().find('/') != std::string::npos) {
      throw CheckpointError(str("safetensors index '", index_path, "': weight_map entry '", name,
                                "' is ", value.dump(), ", not a file name in the folder"));
    }
    const std::string file = value.get<std::string>();
    listed[name] = file;
    if (files.count(file) == 0) {
      const std::size_t at = impl.files.size();
      impl.files.push_back(SafetensorsFile::open(dir + "/" + file));
      files[file] = at;
    }
  }
  for (const auto& [file, at] : files) {
    for (const auto& e : impl.files[at].entries()) {
      auto it = listed.find(e.name);
      if (it == listed.end() || it->second != file) {
        throw CheckpointError(str(
            "safetensors shard '", dir, "/", file, "' holds tensor '", e.name, "', which ",
            index_path,
            it == listed.end() ? std::string(" does not list") : " puts in '" + it->second + "'",
            ": the folder is inconsistent; write the index again or download it whole"));
      }
      impl.tensors.push_back({e.name, e.scalar_type, e.shape});
      impl.shard.push_back(at);
      listed.erase(it);
    }
  }
  if (!listed.empty()) {
    throw CheckpointError(str("safetensors index '", index_path, "' lists tensor '",
                              listed.begin()->first, "' in '", listed.begin()->second,
                              "', which does not hold it (", listed.size(),
                              " tensor(s) missing from the shards): the folder is incomplete"));
  }
  impl.description = str("Hugging Face folder '", dir, "' (", files.size(),
                         " safetensors shard(s) listed by ", kSafetensorsIndex, ")");
  return impl;
}

}  // namespace

WeightsFile WeightsFile::open(const std::string& path) {
  auto impl = std::make_shared<Impl>();
  const runtime::PathType type = runtime::path_type(path);
  std::string file = path;
  if (type == runtime::PathType::kMissing) {
    throw CheckpointError(str("'", path,
                              "' does not exist: give an hpctrain checkpoint or run directory, a "
                              "safetensors file or a torch.save state_dict"));
  }
  if (type == runtime::PathType::kDirectory) {
    if (fs::exists(path + "/" + kManifestFile) || fs::is_directory(checkpoints_dir(path))) {
      impl->format = Format::kCheckpoint;
    } else if (fs::exists(path + "/model.safetensors")) {
      file = path + "/model.safetensors";
    } else if (fs::exists(path + "/" + kSafetensorsIndex)) {
      impl->format = Format::kSafetensors;
      ShardedSet set = open_sharded(path);
      impl->safetensors = std::move(set.files);
      impl->tensors = std::move(set.tensors);
      impl->shard = std::move(set.shard);
      impl->description = std::move(set.description);
    } else if (fs::exists(path + "/pytorch_model.bin")) {
      file = path + "/pytorch_model.bin";
    } else {
      throw CheckpointError(
          str("directory '", path,
              "' is no hpctrain checkpoint (no manifest.json), run directory (no checkpoints/), "
              "or model folder (no model.safetensors, model.safetensors.index.json or "
              "pytorch_model.bin)"));
    }
  }
  if (!impl->safetensors.empty()) {
    // A sharded folder, opened above.
  } else if (impl->format == Format::kCheckpoint) {
    std::string dir = path;
    if (!fs::exists(path + "/" + kManifestFile)) {
      const ResumeChoice choice = choose_resume(path, "auto");
      if (!choice.path) {
        throw CheckpointError(str("run directory '", path, "' holds no checkpoint that verifies",
                                  choice.skipped.empty() ? "" : str(" (", choice.skipped[0], ")"),
                                  ": give a step_<N> directory"));
      }
      dir = *choice.path;
    }
    const Verification v = verify(dir);
    if (!v.ok) {
      throw CheckpointError(
          str("checkpoint '", dir, "' does not verify (", v.reason, "): give another checkpoint"));
    }
    impl->checkpoint_dir = dir;
    impl->manifest = read_manifest(dir);
    impl->description = str("hpctrain checkpoint '", dir, "' (step ",
                            impl->manifest.value("step", std::int64_t{0}), ")");
    for (const auto& [name, entry] : impl->manifest.at("tensors").items()) {
      if (name.rfind("model/", 0) != 0) continue;  // optimizer state stays behind
      const auto dtype = h5::dtype_from_name(entry.at("dtype").get<std::string>());
      if (!dtype) {
        throw CheckpointError(str("checkpoint '", dir, "': tensor '", name, "' has dtype '",
                                  entry.at("dtype").get<std::string>(),
                                  "', unknown to this hpctrain"));
      }
      impl->tensors.push_back(
          {name.substr(6), *dtype, entry.at("shape").get<std::vector<std::int64_t>>()});
    }
  } else {
    runtime::require_regular_file(file, runtime::FileKind::kCheckpoint, "weights file",
                                  "give a safetensors file or a torch.save state_dict");
    const Magic magic = sniff(file);
    if (magic == Magic::kLegacyTorch) {
      throw CheckpointError(
          str("'", file,
              "' is in torch.save's format from before PyTorch 1.6, which hpctrain does not read: "
              "load it in Python and save it again with torch.save (or as safetensors)"));
    }
    if (magic == Magic::kZip) {
      impl->format = Format::kTorch;
      impl->torch_file = torchzip::TorchZipFile::open(file);
      impl->description = str("torch.save file '", file, "'");
      if (!impl->torch_file->location().empty()) {
        impl->notes.push_back(str("the state_dict is ", impl->torch_file->location()));
      }
      if (!impl->torch_file->skipped().empty()) {
        impl->notes.push_back(str(impl->torch_file->skipped().size(),
                                  " entries that are not tensors were skipped (the first: '",
                                  impl->torch_file->skipped().front(), "')"));
      }
      for (const auto& e : impl->torch_file->entries()) {
        impl->tensors.push_back({e.name, e.dtype, e.shape});
      }
    } else {
      impl->format = Format::kSafetensors;
      impl->safetensors.push_back(SafetensorsFile::open(file));
      impl->description = str("safetensors file '", file, "'");
      for (const auto& e : impl->safetensors.front().entries()) {
        impl->tensors.push_back({e.name, e.scalar_type, e.shape});
        impl->shard.push_back(0);
      }
    }
  }
  for (std::size_t i = 0; i < impl->tensors.size(); ++i) {
    if (!impl->index.emplace(impl->tensors[i].name, i).second) {
      throw CheckpointError(str(impl->description, " holds tensor '", impl->tensors[i].name,
                                "' twice: save it again"));
    }
  }
  WeightsFile out;
  out.impl_ = std::move(impl);
  return out;
}

WeightsFile::Format WeightsFile::format() const {
  return impl_->format;
}
const std::string& WeightsFile::description() const {
  return impl_->description;
}
const std::vector<WeightsFile::Tensor>& WeightsFile::tensors() const {
  return impl_->tensors;
}
const std::vector<std::string>& WeightsFile::notes() const {
  return impl_->notes;
}

const WeightsFile::Tensor* WeightsFile::find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

torch::Tensor WeightsFile::read(const std::string& name) const {
  const Tensor* t = find(name);
  if (t == nullptr) throw CheckpointError(str(impl_->description, " has no tensor '", name, "'"));
  switch (impl_->format) {
    case Format::kSafetensors: {
      const SafetensorsFile& shard = impl_->safetensors[impl_->shard[impl_->index.at(name)]];
      return shard.read(*shard.find(name));
    }
    case Format::kTorch:
      return impl_->torch_file->read(impl_->torch_file->entries()[impl_->index.at(name)]);
    case Format::kCheckpoint: {
      const auto& entry = impl_->manifest.at("tensors").at("model/" + name);
      torch::Tensor out = torch::empty(t->shape, torch::TensorOptions(t->dtype));
      h5::read_slab_hdf5(impl_->checkpoint_dir + "/" + entry.at("file").get<std::string>(),
                         entry.at("dataset").get<std::string>(), -1, 0, 0, out);
      return out;
    }
  }
  throw CheckpointError("unknown weights format (internal error)");
}

}  // namespace hpctrain::checkpoint
