#include "hpctrain/data/dataset_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "dataset_internal.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

constexpr std::int64_t kChunkBytes = 128 * 1024;

// Creates `path` under a temporary name, lets `fill` write its content, then fsyncs and renames
// it into place, so a crash never leaves a half-written file under the final name.
template <typename Fill>
void write_atomically(const std::string& path, Task kind, const Provenance& provenance,
                      Fill&& fill) {
  auto hold = lock_hdf5();
  h5::silence_errors();
  const std::string where = str("output file '", path, "'");
  const std::string temp = str(path, ".tmp.", ::getpid());
  try {
    {
      h5::Handle file(HPCTRAIN_H5(H5Fcreate(temp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                  str(where, " (creating ", temp, ")")),
                      H5Fclose);
      h5::write_attr(file.get(), "schema_version", detail::kSchemaVersion, where);
      h5::write_attr(file.get(), "kind", std::string(task_name(kind)), where);
      h5::write_attr(file.get(), "source", provenance.source, where);
      h5::write_attr(file.get(), "created_by", provenance.created_by, where);
      h5::write_attr(file.get(), "created_at", utc_timestamp(), where);
      fill(file.get(), where);
      HPCTRAIN_H5(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), where);
    }
    int fd = ::open(temp.c_str(), O_RDONLY);
    if (fd < 0 || ::fsync(fd) != 0) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      throw DataError(str(where, ": cannot sync ", temp, ": ", std::strerror(err)));
    }
    ::close(fd);
    if (std::rename(temp.c_str(), path.c_str()) != 0) {
      throw DataError(str(where, ": cannot rename ", temp, " into place: ", std::strerror(errno)));
    }
  } catch (...) {
    std::remove(temp.c_str());
    throw;
  }
}

// Creates a chunked dataset of `dims` holding `data` (of memory type `mem_type`).
void write_dataset(hid_t file, const char* name, hid_t file_type, hid_t mem_type,
                   const std::vector<std::int64_t>& dims, std::int64_t chunk_rows, const void* data,
                   const std::string& where) {
  const std::string what = str(where, ", dataset /", name);
  std::vector<hsize_t> extent(dims.begin(), dims.end());
  std::vector<hsize_t> chunk(extent);
  chunk[0] = static_cast<hsize_t>(std::clamp<std::int64_t>(chunk_rows, 1, dims[0]));
  h5::Handle space(
      HPCTRAIN_H5(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), what),
      H5Sclose);
  h5::Handle dcpl(HPCTRAIN_H5(H5Pcreate(H5P_DATASET_CREATE), what), H5Pclose);
  HPCTRAIN_H5(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), what);
  h5::Handle dataset(HPCTRAIN_H5(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT,
                                            dcpl.get(), H5P_DEFAULT),
                                 what),
                     H5Dclose);
  HPCTRAIN_H5(H5Dwrite(dataset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), what);
}

template <typename Token>
void write_tokens(const std::string& path, const std::vector<Token>& tokens,
                  std::int64_t vocab_size, const std::string& tokenizer,
                  const Provenance& provenance, hid_t file_type, hid_t mem_type) {
  if (tokens.empty()) throw DataError(str("output file '", path, "': no tokens to write"));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (static_cast<std::int64_t>(tokens[i]) < 0 ||
        static_cast<std::int64_t>(tokens[i]) >= vocab_size) {
      throw DataError(str("output file '", path, "': token id ", tokens[i], " at position ", i,
                          " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  write_atomically(
      path, Task::kLanguageModel, provenance, [&](hid_t file, const std::string& where) {
        const std::int64_t per_chunk = kChunkBytes / static_cast<std::int64_t>(sizeof(Token));
        write_dataset(file, "tokens", file_type, mem_type,
                      {static_cast<std::int64_t>(tokens.size())}, per_chunk, tokens.data(), where);
        h5::Handle dataset(HPCTRAIN_H5(H5Dopen2(file, "tokens", H5P_DEFAULT), where), H5Dclose);
        h5::write_attr(dataset.get(), "vocab_size", vocab_size, where);
        h5::write_attr(dataset.get(), "tokenizer", tokenizer, where);
      });
}

}  // namespace

std::int64_t samples_per_chunk(std::int64_t sample_bytes) {
  std::int64_t samples = 1;
  while (samples * 2 * sample_bytes <= kChunkBytes) samples *= 2;
  return samples;
}

void write_classification_file(const std::string& path, const torch::Tensor& inputs,
                               const torch::Tensor& labels, std::int64_t num_classes, double scale,
                               const Provenance& provenance) {
  const std::string where = str("output file '", path, "'");
  if (inputs.dim() < 2 ||
      (inputs.scalar_type() != torch::kByte && inputs.scalar_type() != torch::kFloat)) {
    throw DataError(str(where, ": inputs must be uint8 or float32 [N, ...], got ",
                        inputs.scalar_type(), " ", inputs.sizes()));
  }
  if (labels.dim() != 1 || labels.scalar_type() != torch::kLong ||
      labels.size(0) != inputs.size(0) || inputs.size(0) == 0) {
    throw DataError(str(where, ": labels must be int64 [N] with N = ", inputs.size(0),
                        " > 0 samples, got ", labels.scalar_type(), " ", labels.sizes()));
  }
  auto input_data = inputs.contiguous();
  auto label_data = labels.contiguous();
  if (label_data.numel() > 0 && (label_data.min().item<std::int64_t>() < 0 ||
                                 label_data.max().item<std::int64_t>() >= num_classes)) {
    throw DataError(str(where, ": labels must lie in [0, ", num_classes, "), found [",
                        label_data.min().item<std::int64_t>(), ", ",
                        label_data.max().item<std::int64_t>(), "]"));
  }
  const bool uint8 = inputs.scalar_type() == torch::kByte;
  const std::vector<std::int64_t> dims(inputs.sizes().begin(), inputs.sizes().end());
  const std::int64_t sample_bytes = inputs[0].numel() * (uint8 ? 1 : 4);
  write_atomically(path, Task::kClassification, provenance, [&](hid_t file, const std::string& w) {
    write_dataset(file, "inputs", uint8 ? H5T_STD_U8LE : H5T_IEEE_F32LE,
                  uint8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, dims,
                  samples_per_chunk(sample_bytes), input_data.data_ptr(), w);
    write_dataset(file, "labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {inputs.size(0)},
                  kChunkBytes / 8, label_data.data_ptr(), w);
    h5::Handle in(HPCTRAIN_H5(H5Dopen2(file, "inputs", H5P_DEFAULT), w), H5Dclose);
    h5::write_attr(in.get(), "scale", scale, w);
    h5::Handle lab(HPCTRAIN_H5(H5Dopen2(file, "labels", H5P_DEFAULT), w), H5Dclose);
    h5::write_attr(lab.get(), "num_classes", num_classes, w);
  });
}

void write_regression_file(const std::string& path, const torch::Tensor& inputs,
                           const torch::Tensor& targets, const Provenance& provenance) {
  const std::string where = str("output file '", path, "'");
  if (inputs.dim() < 1 || targets.dim() < 1 || inputs.scalar_type() != torch::kFloat ||
      targets.scalar_type() != torch::kFloat || inputs.size(0) != targets.size(0) ||
      inputs.size(0) == 0) {
    throw DataError(str(where, ": inputs and targets must be float32 [N, ...] with N > 0, got ",
                        inputs.sizes(), " and ", targets.sizes()));
  }
  auto x = inputs.contiguous();
  auto y = targets.contiguous();
  const std::vector<std::int64_t> xd(x.sizes().begin(), x.sizes().end());
  const std::vector<std::int64_t> yd(y.sizes().begin(), y.sizes().end());
  write_atomically(path, Task::kRegression, provenance, [&](hid_t file, const std::string& w) {
    write_dataset(file, "inputs", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, xd,
                  samples_per_chunk(std::max<std::int64_t>(x[0].numel(), 1) * 4), x.data_ptr(), w);
    write_dataset(file, "targets", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, yd,
                  samples_per_chunk(std::max<std::int64_t>(y[0].numel(), 1) * 4), y.data_ptr(), w);
  });
}

void write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance) {
  write_tokens(path, tokens, vocab_size, tokenizer, provenance, H5T_STD_U16LE, H5T_NATIVE_UINT16);
}

void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance) {
  write_tokens(path, tokens, vocab_size, tokenizer, provenance, H5T_STD_U32LE, H5T_NATIVE_UINT32);
}

void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance) {
  write_tokens(path, tokens, vocab_size, tokenizer, provenance, H5T_STD_I32LE, H5T_NATIVE_INT32);
}

}  // namespace hpctrain::data
