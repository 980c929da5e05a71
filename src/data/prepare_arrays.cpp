// `hpctrain prepare tokens | numpy`: array files to dataset files. Every rank checks every input
// (headers and lengths, cheap) before writing, so a bad input is the same error on every rank;
// then output file j is written by rank j mod ranks, so the files are the same at any rank count.

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "hpctrain/data/array_file.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data {
namespace {

// One range of one input file's values that belongs to a split.
struct Piece {
  std::size_t file = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

void make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw DataError(str("output directory '", dir, "' cannot be created: ", ec.message()));
}

std::string output_name(const std::string& dir, const char* split, std::int64_t shard,
                        bool sharded) {
  if (!sharded) return str(dir, "/", split, ".h5");
  char digits[32];
  std::snprintf(digits, sizeof digits, "%05lld", static_cast<long long>(shard));
  return str(dir, "/", split, "-", digits, ".h5");
}

void check_fraction(double f) {
  if (!(f >= 0 && f < 1)) {
    throw ConfigError(str("--val-fraction ", f, " must lie in [0, 1) (e.g. 0.1; 0: no val.h5)"));
  }
}

}  // namespace

std::vector<PreparedFile> prepare_tokens(const TokenPrepareOptions& o) {
  check_fraction(o.val_fraction);
  if (o.inputs.empty()) throw ConfigError("prepare tokens needs at least one token file");
  if (o.vocab < 2) {
    throw ConfigError(str("--vocab ", o.vocab,
                          ": give the tokenizer's vocabulary size (50257 for GPT-2), at least 2"));
  }
  if (o.shard_size < 0) throw ConfigError("--shard-size must be 0 (one file) or a token count");
  std::vector<ArrayFile> files;
  for (const auto& path : o.inputs) files.push_back(open_token_file(path, o.format, o.dtype));
  std::vector<Piece> train, val;
  std::int64_t train_tokens = 0, val_tokens = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const std::int64_t n = files[f].count;
    const auto n_val =
        static_cast<std::int64_t>(std::floor(static_cast<double>(n) * o.val_fraction));
    if (n - n_val > 0) train.push_back({f, 0, n - n_val});
    if (n_val > 0) val.push_back({f, n - n_val, n});
    train_tokens += n - n_val;
    val_tokens += n_val;
  }
  if (train_tokens < 2 || (o.val_fraction > 0 && val_tokens < 2)) {
    throw DataError(str("prepare tokens: the ", train_tokens < 2 ? "training" : "validation",
                        " split would hold ", train_tokens < 2 ? train_tokens : val_tokens,
                        " tokens: give more tokens or another --val-fraction"));
  }
  make_dir(o.out_dir);
  std::string sources;
  for (const auto& f : files) {
    sources += str(sources.empty() ? "" : ", ", f.path, " (", f.format, " ", f.dtype, ")");
  }
  Provenance provenance{
      str("token files", o.val_fraction > 0 ? str(" (val fraction ", o.val_fraction, ")") : "",
          ": ", sources),
      o.created_by};
  const bool sharded = o.shard_size > 0;
  std::vector<PreparedFile> out;
  std::int64_t shard_index = 0;  // over both splits, so the work spreads over the ranks
  for (auto* split : {&train, &val}) {
    const char* name = split == &train ? "train" : "val";
    const std::int64_t total = split == &train ? train_tokens : val_tokens;
    if (total == 0) continue;
    const std::int64_t per_file = sharded ? o.shard_size : total;
    for (std::int64_t start = 0, j = 0; start < total; start += per_file, ++j, ++shard_index) {
      if (shard_index % o.ranks != o.rank) continue;
      const std::int64_t end = std::min(total, start + per_file);
      std::vector<std::int64_t> ids(static_cast<std::size_t>(end - start));
      // Walk the split's pieces: stream position -> (file, value).
      std::int64_t position = 0, filled = 0;
      for (const Piece& piece : *split) {
        const std::int64_t length = piece.end - piece.begin;
        const std::int64_t lo = std::max(start, position), hi = std::min(end, position + length);
        if (lo < hi) {
          const std::int64_t first = piece.begin + (lo - position);
          read_as_int64(files[piece.file], first, hi - lo, ids.data() + filled);
          for (std::int64_t k = 0; k < hi - lo; ++k) {
            const std::int64_t id = ids[static_cast<std::size_t>(filled + k)];
            if (id < 0 || id >= o.vocab) {
              const ArrayFile& f = files[piece.file];
              throw DataError(str("token file '", f.path, "': token id ", id, " at byte offset ",
                                  f.data_offset + (first + k) * f.element_bytes, " (token ",
                                  first + k, ") is outside the vocabulary [0, ", o.vocab,
                                  "): check --vocab and --dtype"));
            }
          }
          filled += hi - lo;
        }
        position += length;
      }
      const std::string path = output_name(o.out_dir, name, j, sharded);
      if (o.vocab <= 65536) {
        std::vector<std::uint16_t> tokens(ids.begin(), ids.end());
        write_token_file(path, tokens, o.vocab, "external", provenance);
      } else {
        std::vector<std::int32_t> tokens(ids.begin(), ids.end());
        write_token_file(path, tokens, o.vocab, "external", provenance);
      }
      out.push_back({path, str(end - start, " tokens, vocab_size ", o.vocab), end - start});
    }
  }
  return out;
}

std::vector<PreparedFile> prepare_numpy(const NumpyPrepareOptions& o) {
  check_fraction(o.val_fraction);
  if (o.labels.empty() == o.targets.empty()) {
    throw ConfigError("prepare numpy needs --labels (classification) or --targets (regression)");
  }
  if (o.shard_size < 0) throw ConfigError("--shard-size must be 0 (one file) or a sample count");
  const ArrayFile x = open_npy(o.inputs, "--inputs file");
  const bool classify = !o.labels.empty();
  const ArrayFile y =
      open_npy(classify ? o.labels : o.targets, classify ? "--labels file" : "--targets file");
  if (x.dtype != "uint8" && x.dtype != "float32" && x.dtype != "float64") {
    throw DataError(str("--inputs file '", x.path, "': dtype ", x.dtype,
                        " (in the header before byte offset ", x.data_offset,
                        "), expected uint8, float32 or float64 (stored as float32)"));
  }
  if (x.shape.empty() || x.shape[0] < 1) {
    throw DataError(str("--inputs file '", x.path, "': expected (N, ...) with N >= 1 samples"));
  }
  if (y.shape.empty() || y.shape[0] != x.shape[0]) {
    throw DataError(str(y.what, " '", y.path, "' holds ", y.shape.empty() ? 0 : y.shape[0],
                        " rows, --inputs ", x.shape[0], ": one per sample"));
  }
  const std::int64_t n = x.shape[0];
  std::int64_t num_classes = o.num_classes;
  std::vector<std::int64_t> labels;
  if (classify) {
    if (y.shape.size() != 1 || (y.dtype.find("int") == std::string::npos)) {
      throw DataError(str("--labels file '", y.path,
                          "': expected (N,) integer class indices, "
                          "found dtype ",
                          y.dtype, " with ", y.shape.size(),
                          " dimensions (header before byte offset ", y.data_offset, ")"));
    }
    labels.resize(static_cast<std::size_t>(n));
    read_as_int64(y, 0, n, labels.data());
    std::int64_t top = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t v = labels[static_cast<std::size_t>(i)];
      if (v < 0 || (o.num_classes > 0 && v >= o.num_classes) || v >= (std::int64_t{1} << 24)) {
        throw DataError(str("--labels file '", y.path, "': label ", v, " at byte offset ",
                            y.data_offset + i * y.element_bytes, " (sample ", i,
                            ") is outside [0, ",
                            o.num_classes > 0 ? o.num_classes : (std::int64_t{1} << 24),
                            "): labels are class indices; check --num-classes"));
      }
      top = std::max(top, v);
    }
    if (num_classes == 0) num_classes = top + 1;
  } else if (y.dtype != "float32" && y.dtype != "float64") {
    throw DataError(str("--targets file '", y.path, "': dtype ", y.dtype,
                        " (header before byte offset ", y.data_offset,
                        "), expected float32 or float64"));
  }
  std::int64_t row = 1, target_row = 1;
  for (std::size_t d = 1; d < x.shape.size(); ++d) row *= x.shape[d];
  for (std::size_t d = 1; d < y.shape.size(); ++d) target_row *= y.shape[d];
  const auto n_val = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * o.val_fraction));
  if (n - n_val < 1 || (o.val_fraction > 0 && n_val < 1)) {
    throw DataError(str("prepare numpy: ", n, " samples leave the ",
                        n - n_val < 1 ? "training" : "validation",
                        " split empty at --val-fraction ", o.val_fraction));
  }
  make_dir(o.out_dir);
  Provenance provenance{
      str("numpy arrays: ", x.path, " (", x.dtype, "), ", y.path, " (", y.dtype, ")"),
      o.created_by};
  const bool sharded = o.shard_size > 0;
  std::vector<PreparedFile> out;
  std::int64_t shard_index = 0;
  for (int split = 0; split < 2; ++split) {
    const std::int64_t begin = split == 0 ? 0 : n - n_val;
    const std::int64_t total = split == 0 ? n - n_val : n_val;
    if (total == 0) continue;
    const std::int64_t per_file = sharded ? o.shard_size : total;
    for (std::int64_t start = 0, j = 0; start < total; start += per_file, ++j, ++shard_index) {
      if (shard_index % o.ranks != o.rank) continue;
      const std::int64_t first = begin + start;
      const std::int64_t count = std::min(per_file, total - start);
      std::vector<std::int64_t> shape(x.shape);
      shape[0] = count;
      torch::Tensor inputs;
      if (x.dtype == "uint8") {
        inputs = torch::empty(shape, torch::kByte);
        std::vector<std::int64_t> values(static_cast<std::size_t>(count * row));
        read_as_int64(x, first * row, count * row, values.data());
        auto* p = inputs.data_ptr<std::uint8_t>();
        for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<std::uint8_t>(values[i]);
      } else {
        inputs = torch::empty(shape, torch::kFloat);
        read_as_float(x, first * row, count * row, inputs.data_ptr<float>());
      }
      const std::string path = output_name(o.out_dir, split == 0 ? "train" : "val", j, sharded);
      if (classify) {
        auto part = torch::tensor(
            std::vector<std::int64_t>(labels.begin() + first, labels.begin() + first + count),
            torch::kLong);
        write_classification_file(path, inputs, part, num_classes,
                                  x.dtype == "uint8" ? 1.0 / 255.0 : 1.0, provenance);
        out.push_back({path, str(count, " samples, ", num_classes, " classes"), count});
      } else {
        std::vector<std::int64_t> tshape(y.shape);
        tshape[0] = count;
        auto targets = torch::empty(tshape, torch::kFloat);
        read_as_float(y, first * target_row, count * target_row, targets.data_ptr<float>());
        write_regression_file(path, inputs, targets, provenance);
        out.push_back({path, str(count, " samples (regression)"), count});
      }
    }
  }
  return out;
}

}  // namespace hpctrain::data
