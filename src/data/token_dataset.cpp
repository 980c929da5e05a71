// Language-modelling files: /tokens, a 1-D uint16, uint32 or int32 token stream with a vocab_size
// attribute. Sample i is the window tokens[i*L, i*L + L + 1) (L = seq_len): inputs are its first
// L tokens, targets its last L. Consecutive samples share one token, so a run of consecutive
// samples is one token range, read with one single-block hyperslab.

#include <algorithm>
#include <cmath>

#include "dataset_internal.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

template <typename Token>
void widen(const std::uint8_t* raw, std::int64_t first, std::int64_t count, std::int64_t* out) {
  const Token* src = reinterpret_cast<const Token*>(raw) + first;
  for (std::int64_t t = 0; t < count; ++t) out[t] = static_cast<std::int64_t>(src[t]);
}

class TokenDataset final : public Dataset {
 public:
  TokenDataset(h5::Handle file, h5::Handle tokens, DatasetInfo info, std::string label)
      : file_(std::move(file)),
        tokens_(std::move(tokens)),
        info_(std::move(info)),
        label_(std::move(label)),
        uint16_(info_.input_dtype == "uint16"),
        uint32_(info_.input_dtype == "uint32") {
    space_ = h5::Handle(HPCTRAIN_H5(H5Dget_space(tokens_.get()), where()), H5Sclose);
  }

  ~TokenDataset() override {
    auto hold = lock_hdf5();
    space_.reset();
    tokens_.reset();
    file_.reset();
  }

  const DatasetInfo& info() const override { return info_; }

  Batch read(const std::vector<std::int64_t>& indices) override {
    auto hold = lock_hdf5();
    const std::int64_t seq_len = info_.seq_len;
    const SortedRequest request = sort_request(indices, info_.num_samples, label_);
    const auto batch = static_cast<std::int64_t>(indices.size());
    Batch out;
    out.indices = indices;
    out.inputs = torch::empty({batch, seq_len}, torch::kLong);
    out.targets = torch::empty({batch, seq_len}, torch::kLong);
    if (batch == 0) return out;

    // Token ranges of the runs, and where each distinct sample's window starts in the buffer.
    std::vector<Run> ranges;
    std::vector<std::int64_t> window_start;
    window_start.reserve(request.unique.size());
    std::int64_t buffered = 0;
    for (const Run& run : request.runs) {
      ranges.push_back({run.start * seq_len, run.count * seq_len + 1});
      for (std::int64_t j = 0; j < run.count; ++j) window_start.push_back(buffered + j * seq_len);
      buffered += run.count * seq_len + 1;
    }
    const std::int64_t element = uint16_ ? 2 : 4;
    raw_.resize(static_cast<std::size_t>(buffered * element));
    read_runs(tokens_.get(), space_.get(), {info_.num_tokens}, ranges,
              uint16_   ? H5T_NATIVE_UINT16
              : uint32_ ? H5T_NATIVE_UINT32
                        : H5T_NATIVE_INT32,
              raw_.data(), where());

    std::int64_t* inputs = out.inputs.data_ptr<std::int64_t>();
    std::int64_t* targets = out.targets.data_ptr<std::int64_t>();
    window_.resize(static_cast<std::size_t>(seq_len + 1));
    for (std::int64_t k = 0; k < batch; ++k) {
      const std::int64_t row =
          request.identity ? k : request.row_of_request[static_cast<std::size_t>(k)];
      const std::int64_t first = window_start[static_cast<std::size_t>(row)];
      if (uint16_) {
        widen<std::uint16_t>(raw_.data(), first, seq_len + 1, window_.data());
      } else if (uint32_) {
        widen<std::uint32_t>(raw_.data(), first, seq_len + 1, window_.data());
      } else {
        widen<std::int32_t>(raw_.data(), first, seq_len + 1, window_.data());
      }
      for (std::int64_t t = 0; t <= seq_len; ++t) {
        const std::int64_t token = window_[static_cast<std::size_t>(t)];
        if (token < 0 || token >= info_.vocab_size) {
          throw DataError(str(where(), ": token id ", token, " in sample ",
                              indices[static_cast<std::size_t>(k)], " is outside [0, ",
                              info_.vocab_size, "): the file changed after it was opened?"));
        }
      }
      std::copy(window_.begin(), window_.end() - 1, inputs + k * seq_len);
      std::copy(window_.begin() + 1, window_.end(), targets + k * seq_len);
    }
    return out;
  }

 private:
  std::string where() const { return str(label_, ", dataset /tokens"); }

  h5::Handle file_;
  h5::Handle tokens_;
  h5::Handle space_;
  DatasetInfo info_;
  std::string label_;
  bool uint16_;
  bool uint32_;  // prepare text with a vocabulary beyond 65536
  std::vector<std::uint8_t> raw_;
  std::vector<std::int64_t> window_;
};

}  // namespace

std::int64_t token_windows(std::int64_t num_tokens, std::int64_t seq_len,
                           const std::string& where) {
  const std::int64_t num_samples = num_tokens > 0 ? (num_tokens - 1) / seq_len : 0;
  if (num_samples < 1) {
    throw DataError(str(where, ": holds ", num_tokens,
                        " tokens, fewer than one window of seq_len + 1 = ", seq_len + 1,
                        ": use a shorter seq_len or more text"));
  }
  return num_samples;
}

void require_token_batch(const std::string& label, std::int64_t num_samples, std::int64_t seq_len,
                         std::int64_t num_tokens, std::int64_t min_samples) {
  if (num_samples < min_samples) {
    throw DataError(str(label, ": holds ", num_samples, " samples of seq_len ", seq_len, " (",
                        num_tokens, " tokens), fewer than one global batch of ", min_samples,
                        " (data.batch_size x data-parallel ranks): use a smaller data.batch_size, "
                        "a shorter seq_len, fewer ranks, or more text"));
  }
}

DatasetInfo token_stream_info(const std::string& path, std::int64_t num_samples,
                              std::int64_t seq_len, const std::string& dtype,
                              std::int64_t vocab_size, std::int64_t num_tokens,
                              std::int64_t token_bytes) {
  DatasetInfo info;
  info.path = path;
  info.kind = DatasetKind::kLanguageModel;
  info.num_samples = num_samples;
  info.sample_shape = {seq_len};
  info.input_dtype = dtype;
  info.vocab_size = vocab_size;
  info.seq_len = seq_len;
  info.num_tokens = num_tokens;
  info.sample_bytes = (seq_len + 1) * token_bytes;
  return info;
}

std::unique_ptr<Dataset> open_tokens(h5::Handle file, const std::string& path,
                                     const DatasetExpectation& expect, const ReadOptions& options) {
  const std::string label = file_label(path, expect.config_key);
  const std::string where = str(label, ", dataset /tokens");
  h5::Handle probe(HPCTRAIN_H5(H5Dopen2(file.get(), "tokens", H5P_DEFAULT), where), H5Dclose);
  const auto dims = h5::dataset_dims(probe.get(), where);
  h5::Handle type(HPCTRAIN_H5(H5Dget_type(probe.get()), where), H5Tclose);
  const std::string dtype = h5::type_name(type.get());
  if (dims.size() != 1) {
    throw DataError(str(where, ": expected rank 1 (one token stream), found rank ", dims.size(),
                        " with shape ", h5::shape_string(dims),
                        ": concatenate the documents into one 1-D stream (docs/DATA.md)"));
  }
  if (dtype != "uint16" && dtype != "uint32" && dtype != "int32") {
    throw DataError(str(where, ": expected dtype uint16, uint32 or int32 token ids, found ", dtype,
                        ": convert it, e.g. with h5py: f['tokens'] = t.astype('uint16')"));
  }
  if (expect.seq_len <= 0) {
    throw DataError(str(label,
                        " holds a token stream (/tokens, language modelling), but the run "
                        "gave no sequence length: train a language model on it (its model config "
                        "sets seq_len), or use a classification file with /inputs and /labels"));
  }
  auto vocab = number_attr(probe.get(), file.get(), "vocab_size", where);
  if (vocab && (*vocab < 1 || *vocab != std::floor(*vocab))) {
    throw DataError(
        str(where, ": attribute vocab_size = ", *vocab, " should be a positive integer"));
  }
  if (!vocab && expect.vocab_size <= 0) {
    throw DataError(str(where,
                        ": attribute vocab_size is missing: add it (h5py: "
                        "f['tokens'].attrs['vocab_size'] = 256) or set the model's vocab_size"));
  }
  const std::int64_t vocab_size = vocab ? static_cast<std::int64_t>(*vocab) : expect.vocab_size;
  if (expect.vocab_size > 0 && vocab_size > expect.vocab_size) {
    throw DataError(str(label, ": the file's vocab_size is ", vocab_size, " but the model has ",
                        expect.vocab_size, " token ids: set the model's vocab_size to at least ",
                        vocab_size, ", or prepare the data with the model's tokenizer"));
  }

  const std::int64_t num_tokens = dims[0];
  const std::int64_t seq_len = expect.seq_len;
  const std::int64_t num_samples = token_windows(num_tokens, seq_len, where);

  // One pass over the stream: every id must index the embedding.
  const bool uint16 = dtype == "uint16";
  std::vector<std::int32_t> block(static_cast<std::size_t>(std::min(num_tokens, kScanBlock)));
  h5::Handle space(HPCTRAIN_H5(H5Dget_space(probe.get()), where), H5Sclose);
  const std::int64_t scan_end = options.trusted ? 0 : num_tokens;  // validated in this run already
  for (std::int64_t begin = 0; begin < scan_end; begin += kScanBlock) {
    const std::int64_t count = std::min(kScanBlock, num_tokens - begin);
    select_rows(space.get(), {{begin, count}}, {num_tokens}, where);
    const auto mem_count = static_cast<hsize_t>(count);
    h5::Handle mem(HPCTRAIN_H5(H5Screate_simple(1, &mem_count, nullptr), where), H5Sclose);
    HPCTRAIN_H5(
        H5Dread(probe.get(), H5T_NATIVE_INT32, mem.get(), space.get(), H5P_DEFAULT, block.data()),
        where);
    check_token_ids(block.data(), count, begin, vocab_size, where,
                    " (attribute vocab_size): fix the tokenizer output or the vocab_size "
                    "attribute");
  }
  require_token_batch(label, num_samples, seq_len, num_tokens, expect.min_samples);

  DatasetInfo info =
      token_stream_info(path, num_samples, seq_len, dtype, vocab_size, num_tokens, uint16 ? 2 : 4);
  space.reset();
  probe.reset();
  h5::Handle tokens = open_cached(file.get(), "tokens", uint16 ? 2 : 4, options, where, info);
  return std::make_unique<TokenDataset>(std::move(file), std::move(tokens), std::move(info), label);
}

}  // namespace hpctrain::data::detail
