// safetensors read and written directly (format and checks: include/hpctrain/checkpoint/
// safetensors.hpp). The header is validated completely before any tensor is read, so a damaged
// file is refused with the offset at fault instead of loading garbage or reading past its end.

#include "hpctrain/checkpoint/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "file_io.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

// The format's own bound on the header (100 MB): a larger length is damage, not a header.
constexpr std::uint64_t kMaxHeader = 100'000'000;

struct DtypeName {
  const char* name;
  torch::ScalarType type;
  bool supported;  // LibTorch has the type
};

// Every dtype name of the format; the unsupported ones are valid files LibTorch cannot hold.
constexpr DtypeName kDtypes[] = {
    {"BOOL", torch::kBool, true},        {"U8", torch::kByte, true},
    {"I8", torch::kChar, true},          {"I16", torch::kShort, true},
    {"I32", torch::kInt, true},          {"I64", torch::kLong, true},
    {"F16", torch::kHalf, true},         {"BF16", torch::kBFloat16, true},
    {"F32", torch::kFloat, true},        {"F64", torch::kDouble, true},
    {"C64", torch::kComplexFloat, true}, {"U16", torch::kFloat, false},
    {"U32", torch::kFloat, false},       {"U64", torch::kFloat, false},
    {"F8_E4M3", torch::kFloat, false},   {"F8_E5M2", torch::kFloat, false},
};

std::string dtype_list() {
  std::string out;
  for (const auto& d : kDtypes) out += (out.empty() ? "" : ", ") + std::string(d.name);
  return out;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw CheckpointError(str("safetensors file '", path, "': ", what));
}

std::uint64_t entry_bytes(const SafetensorsEntry& e) {
  std::uint64_t n = c10::elementSize(e.scalar_type);
  for (auto s : e.shape) n *= static_cast<std::uint64_t>(s);
  return n;
}

// One tensor's header entry, checked field by field.
SafetensorsEntry parse_entry(const std::string& path, const std::string& name,
                             const nlohmann::json& info) {
  const std::string where = str("header entry '", name, "'");
  if (!info.is_object()) refuse(path, str(where, " is not an object {dtype, shape, data_offsets}"));
  for (const auto& [key, value] : info.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      refuse(path, str(where, " has an unknown field '", key,
                       "' (a tensor has dtype, shape and data_offsets)"));
    }
  }
  SafetensorsEntry e;
  e.name = name;
  if (!info.contains("dtype") || !info["dtype"].is_string()) {
    refuse(path, str(where, ": field 'dtype' is missing or not a string"));
  }
  e.dtype = info["dtype"].get<std::string>();
  const DtypeName* known = nullptr;
  for (const auto& d : kDtypes) {
    if (e.dtype == d.name) known = &d;
  }
  if (known == nullptr) {
    refuse(path, str(where, ": field 'dtype' is '", clip(e.dtype, 40),
                     "', not a safetensors dtype (", dtype_list(), ")"));
  }
  if (!known->supported) {
    refuse(path, str(where, ": dtype ", e.dtype,
                     " has no LibTorch type here: convert the tensor to F32, F16 or BF16"));
  }
  e.scalar_type = known->type;
  if (!info.contains("shape") || !info["shape"].is_array()) {
    refuse(path, str(where, ": field 'shape' is missing or not a list of sizes"));
  }
  for (const auto& s : info["shape"]) {
    if (!s.is_number_unsigned()) {
      refuse(path, str(where, ": field 'shape' holds ", clip(s.dump(), 40),
                       ", not a non-negative integer"));
    }
    e.shape.push_back(s.get<std::int64_t>());
  }
  const auto& offsets = info.contains("data_offsets") ? info["data_offsets"] : nlohmann::json();
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    refuse(path, str(where, ": field 'data_offsets' is ", clip(offsets.dump(), 60),
                     ", not [begin, end] (two non-negative integers)"));
  }
  e.begin = offsets[0].get<std::uint64_t>();
  e.end = offsets[1].get<std::uint64_t>();
  if (e.end < e.begin) {
    refuse(path,
           str(where, ": field 'data_offsets' [", e.begin, ", ", e.end, "] ends before it begins"));
  }
  return e;
}

}  // namespace

struct SafetensorsFile::Impl {
  std::string path;
  io::Fd fd;
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::size_t> index;
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  runtime::require_regular_file(path, runtime::FileKind::kCheckpoint, "safetensors file",
                                "give a safetensors file (model.safetensors)");
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->fd = io::open_file(path, O_RDONLY);
  struct stat st {};
  if (::fstat(impl->fd.get(), &st) != 0) refuse(path, "cannot stat it");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < 8) {
    refuse(path, str("it is ", size,
                     " bytes long, shorter than the 8-byte header length at bytes 0-7 "
                     "(truncated, or not a safetensors file)"));
  }
  unsigned char raw[8];
  io::read_at(impl->fd.get(), raw, 8, 0, path);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | raw[i];
  if (header_len > size - 8) {
    refuse(path, str("the header length at bytes 0-7 is ", header_len,
                     " bytes, past the end of the file (", size, " bytes: at most ", size - 8,
                     " bytes of header fit): truncated, or not a safetensors file"));
  }
  if (header_len > kMaxHeader) {
    refuse(path, str("the header length at bytes 0-7 is ", header_len,
                     " bytes, more than the format's limit of ", kMaxHeader, " bytes"));
  }
  std::string header(header_len, '\0');
  io::read_at(impl->fd.get(), header.data(), header.size(), 8, path);
  if (header.empty() || header.front() != '{') {
    refuse(path, str("the header at byte 8 does not start with '{' (a JSON object): ",
                     header.empty() ? "it is empty" : "not a safetensors file"));
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::parse_error& e) {
    refuse(path, str("the header (bytes 8-", 8 + header_len - 1, ") is not valid JSON near byte ",
                     8 + (e.byte > 0 ? e.byte - 1 : 0), ": ", e.what()));
  }
  if (!j.is_object()) refuse(path, "the header at byte 8 is not a JSON object");
  const std::uint64_t data_start = 8 + header_len;
  const std::uint64_t data_size = size - data_start;
  for (const auto& [name, info] : j.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) refuse(path, "header field '__metadata__' is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          refuse(path, str("header field '__metadata__' maps '", key,
                           "' to a non-string value (it maps strings to strings)"));
        }
        impl->metadata[key] = value.get<std::string>();
      }
      continue;
    }
    SafetensorsEntry e = parse_entry(path, name, info);
    const std::uint64_t need = entry_bytes(e);
    if (e.end - e.begin != need) {
      refuse(path, str("header entry '", name, "': shape ", slab::shape_text(e.shape), " of ",
                       e.dtype, " needs ", need, " bytes, but field 'data_offsets' [", e.begin,
                       ", ", e.end, "] spans ", e.end - e.begin));
    }
    if (e.end > data_size) {
      refuse(path, str("header entry '", name, "': field 'data_offsets' [", e.begin, ", ", e.end,
                       "] reaches file byte ", data_start + e.end, ", past the end of the file (",
                       size, " bytes; the data section holds ", data_size, " bytes from byte ",
                       data_start, "): the file is truncated"));
    }
    e.begin += data_start;
    e.end += data_start;
    impl->entries.push_back(std::move(e));
  }
  // Sorted by offset, the tensors must tile the data section exactly: no overlap, no gap, no
  // bytes left over (as the format's own validation demands).
  std::sort(impl->entries.begin(), impl->entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  std::uint64_t at = data_start;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : impl->entries) {
    auto rel = [data_start](std::uint64_t x) { return x - data_start; };
    if (e.begin < at) {
      refuse(path,
             str("header entry '", e.name, "': field 'data_offsets' [", rel(e.begin), ", ",
                 rel(e.end), "] overlaps '", previous->name, "' [", rel(previous->begin), ", ",
                 rel(previous->end), "] (file bytes ", e.begin, "-", at - 1, " claimed twice)"));
    }
    if (e.begin > at) {
      refuse(path, str("header entry '", e.name, "': field 'data_offsets' [", rel(e.begin), ", ",
                       rel(e.end), "] leaves file bytes ", at, "-", e.begin - 1,
                       " to no tensor (the offsets must cover the data section without gaps)"));
    }
    at = e.end;
    previous = &e;
  }
  if (at != size) {
    refuse(path, str("file bytes ", at, "-", size - 1,
                     " after the last tensor belong to no tensor (the offsets must end at the "
                     "end of the file)"));
  }
  for (std::size_t i = 0; i < impl->entries.size(); ++i) impl->index[impl->entries[i].name] = i;
  SafetensorsFile file;
  file.impl_ = std::move(impl);
  return file;
}

const std::vector<SafetensorsEntry>& SafetensorsFile::entries() const {
  return impl_->entries;
}

const std::map<std::string, std::string>& SafetensorsFile::metadata() const {
  return impl_->metadata;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->entries[it->second];
}

const std::string& SafetensorsFile::path() const {
  return impl_->path;
}

torch::Tensor SafetensorsFile::read(const SafetensorsEntry& entry) const {
  torch::Tensor out = torch::empty(entry.shape, torch::TensorOptions(entry.scalar_type));
  if (entry.end > entry.begin) {
    io::read_at(impl_->fd.get(), out.data_ptr(), entry.end - entry.begin,
                static_cast<off_t>(entry.begin), impl_->path);
  }
  return out;
}

std::string safetensors_dtype(torch::ScalarType dtype, const std::string& what) {
  for (const auto& d : kDtypes) {
    if (d.supported && d.type == dtype) return d.name;
  }
  throw CheckpointError(str(what, ": dtype ", c10::toString(dtype),
                            " has no safetensors name: convert it to float32 first"));
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  std::set<std::string> names;
  std::uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !names.insert(name).second) {
      throw CheckpointError(
          str("cannot write ", path, ": tensor name '", name, "' is reserved or given twice"));
    }
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const auto bytes = static_cast<std::uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type(), str(path, ": ", name))},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = path + ".tmp";
  try {
    io::Fd fd = io::open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    unsigned char len[8];
    std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
    io::write_at(fd.get(), len, 8, 0, tmp);
    io::write_at(fd.get(), text.data(), text.size(), 8, tmp);
    off_t at = static_cast<off_t>(8 + text.size());
    for (const torch::Tensor& t : data) {
      const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
      if (bytes > 0) io::write_at(fd.get(), t.data_ptr(), bytes, at, tmp);
      at += static_cast<off_t>(bytes);
    }
    io::sync_fd(fd.get(), tmp);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  io::rename_path(tmp, path);
  io::sync_path(io::parent_dir(path));
}

}  // namespace hpctrain::checkpoint
