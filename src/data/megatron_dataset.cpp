// Megatron-LM's indexed datasets (docs/DATA.md, "Megatron indexed datasets"): PREFIX.idx holds
// the index (the MMIDIDX layout: magic, version, dtype code, sequence and document counts, then
// the sequence lengths, their byte pointers into PREFIX.bin and the document indices), PREFIX.bin
// the token ids. hpctrain reads the sequences in index order as one token stream, exactly like
// an HDF5 /tokens stream: sample i is the window [i*L, i*L + L + 1) of it (L = seq_len).
//
// Both files are mapped read-only (PROT_READ, never written); everything the index says is
// checked against the files' sizes before a token is read, so a damaged index is a DataError
// naming the field, never a read past the end.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "dataset_internal.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::data::detail {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::uint64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

struct TokenType {
  const char* name = nullptr;
  int bytes = 0;
};

// Megatron's dtype codes; 6 and 7 (float64, float32) are not token ids.
TokenType token_type(std::uint8_t code) {
  switch (code) {
    case 1: return {"uint8", 1};
    case 2: return {"int8", 1};
    case 3: return {"int16", 2};
    case 4: return {"int32", 4};
    case 5: return {"int64", 8};
    case 8: return {"uint16", 2};
    default: return {};
  }
}

template <typename T>
T load(const std::uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// A file mapped read-only; unmapped on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }

  // Checks the path (a regular, readable file: a FIFO would block open) and maps it.
  void open(const std::string& path, const std::string& label) {
    const runtime::PathType type = runtime::path_type(path);
    if (type == runtime::PathType::kMissing) {
      throw DataError(str(label, ": '", clip(path), "' does not exist: a Megatron dataset is ",
                          "PREFIX.bin and PREFIX.idx; give the prefix as path (docs/DATA.md)"));
    }
    if (type != runtime::PathType::kRegular) {
      throw DataError(str(label, ": '", clip(path), "' is not a regular file (",
                          runtime::path_type_name(type), "): give the prefix of a .bin/.idx pair"));
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      throw DataError(str(label, ": '", clip(path), "' cannot be read (", std::strerror(errno),
                          "): check its permissions for the user the job runs as"));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw DataError(str(label, ": cannot stat '", clip(path), "': ", std::strerror(err)));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw DataError(str(label, ": cannot map '", clip(path), "' (", std::strerror(err), ")"));
      }
      data_ = static_cast<std::uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file
  }
  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// What the index says, checked against both files.
struct MegatronIndex {
  TokenType type;
  std::uint64_t sequences = 0;
  const std::uint8_t* lengths = nullptr;   // int32 [sequences]
  const std::uint8_t* pointers = nullptr;  // int64 [sequences], bytes into .bin
  /// First token of each sequence in the stream, and the total at the end: [sequences + 1].
  std::vector<std::int64_t> starts;
};

MegatronIndex parse_index(const MappedFile& idx, const MappedFile& bin, const std::string& where,
                          const std::string& bin_name) {
  const std::uint8_t* p = idx.data();
  const std::uint64_t size = idx.size();
  if (size < kHeaderBytes) {
    throw DataError(str(where, ": ", size, " bytes, shorter than the ", kHeaderBytes,
                        "-byte header (magic, version, dtype code, counts): not a Megatron index"));
  }
  if (std::memcmp(p, kMagic, sizeof kMagic) != 0) {
    std::string found;
    for (std::size_t i = 0; i < sizeof kMagic; ++i) {
      const auto c = p[i];
      static const char* hex = "0123456789abcdef";
      found += (c >= 32 && c < 127) ? std::string(1, static_cast<char>(c))
                                    : std::string{'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
    throw DataError(
        str(where, ": field magic is '", found,
            "', expected 'MMIDIDX\\0\\0': not a Megatron indexed dataset index "
            "(written by Megatron-LM's preprocess_data.py or its IndexedDatasetBuilder)"));
  }
  const auto version = load<std::uint64_t>(p + 9);
  if (version != 1) {
    throw DataError(str(where, ": field version is ", version,
                        ", this hpctrain reads version 1 of the MMIDIDX index"));
  }
  const std::uint8_t code = p[17];
  MegatronIndex index;
  index.type = token_type(code);
  if (index.type.bytes == 0) {
    throw DataError(str(where, ": field dtype code is ", +code,
                        code == 6 || code == 7 ? " (a floating-point type), not token ids: "
                                               : " (unknown; Megatron's codes are 1-8): ",
                        "token files use 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64 or 8 uint16"));
  }
  index.sequences = load<std::uint64_t>(p + 18);
  const auto documents = load<std::uint64_t>(p + 26);
  const std::uint64_t room = size - kHeaderBytes;
  // 12 bytes per sequence (length, pointer), 8 per document index; checked without overflow.
  if (index.sequences > room / 12 || documents > (room - index.sequences * 12) / 8) {
    throw DataError(str(where, ": fields sequence count (", index.sequences,
                        ") and document count (", documents, ") need ", kHeaderBytes, " + 12 x ",
                        index.sequences, " + 8 x ", documents, " bytes, the index has ", size,
                        ": the index is truncated or its counts are damaged"));
  }
  const std::uint64_t used = kHeaderBytes + index.sequences * 12 + documents * 8;
  // Multimodal indices append one mode byte per sequence; nothing else may follow.
  if (size != used && size != used + index.sequences) {
    throw DataError(str(where, ": ", size - used, " bytes follow the document indices (",
                        index.sequences, " sequences, ", documents,
                        " document indices end at byte ", used,
                        "): the counts do not match the file, which is damaged"));
  }
  index.lengths = p + kHeaderBytes;
  index.pointers = index.lengths + index.sequences * 4;
  const std::uint8_t* docs = index.pointers + index.sequences * 8;
  index.starts.resize(index.sequences + 1);
  index.starts[0] = 0;
  const auto item = static_cast<std::uint64_t>(index.type.bytes);
  for (std::uint64_t s = 0; s < index.sequences; ++s) {
    const auto length = load<std::int32_t>(index.lengths + s * 4);
    const auto pointer = load<std::int64_t>(index.pointers + s * 8);
    if (length < 0) {
      throw DataError(str(where, ": field sequence_lengths[", s, "] is ", length,
                          ", negative: the index is damaged"));
    }
    const auto bytes = static_cast<std::uint64_t>(length) * item;
    if (pointer < 0 || static_cast<std::uint64_t>(pointer) > bin.size() ||
        bytes > bin.size() - static_cast<std::uint64_t>(pointer)) {
      throw DataError(str(where, ": field sequence_pointers[", s, "] = ", pointer, " with length ",
                          length, " (", bytes, " bytes) reaches past the end of ", bin_name, " (",
                          bin.size(), " bytes): the .bin file is truncated or belongs to ",
                          "another index"));
    }
    index.starts[s + 1] = index.starts[s] + length;
  }
  // Document indices: sequence numbers where documents start, 0 first, the count last.
  if (documents < 1) {
    throw DataError(str(where,
                        ": field document count is 0; a Megatron index lists at least "
                        "document_indices[0] = 0"));
  }
  std::uint64_t previous = 0;
  for (std::uint64_t d = 0; d < documents; ++d) {
    const auto value = load<std::int64_t>(docs + d * 8);
    const bool bad = value < 0 || static_cast<std::uint64_t>(value) > index.sequences ||
                     (d == 0 && value != 0) || static_cast<std::uint64_t>(value) < previous ||
                     (d + 1 == documents && static_cast<std::uint64_t>(value) != index.sequences);
    if (bad) {
      throw DataError(str(where, ": field document_indices[", d, "] = ", value,
                          ": document indices rise from 0 to the sequence count (", index.sequences,
                          "): the index is damaged"));
    }
    previous = static_cast<std::uint64_t>(value);
  }
  return index;
}

template <typename T>
void widen_ids(const std::uint8_t* src, std::int64_t count, std::int64_t* out) {
  for (std::int64_t t = 0; t < count; ++t) {
    out[t] = static_cast<std::int64_t>(load<T>(src + t * static_cast<std::int64_t>(sizeof(T))));
  }
}

void widen_any(int code_bytes, bool is_signed, const std::uint8_t* src, std::int64_t count,
               std::int64_t* out) {
  switch (code_bytes * (is_signed ? -1 : 1)) {
    case 1: widen_ids<std::uint8_t>(src, count, out); break;
    case -1: widen_ids<std::int8_t>(src, count, out); break;
    case 2: widen_ids<std::uint16_t>(src, count, out); break;
    case -2: widen_ids<std::int16_t>(src, count, out); break;
    case -4: widen_ids<std::int32_t>(src, count, out); break;
    default: widen_ids<std::int64_t>(src, count, out); break;
  }
}

class MegatronDataset final : public Dataset {
 public:
  MegatronDataset(std::unique_ptr<MappedFile> idx, std::unique_ptr<MappedFile> bin,
                  MegatronIndex index, DatasetInfo info, std::string where)
      : idx_(std::move(idx)),
        bin_(std::move(bin)),
        index_(std::move(index)),
        info_(std::move(info)),
        where_(std::move(where)),
        is_signed_(info_.input_dtype.rfind("int", 0) == 0) {}

  const DatasetInfo& info() const override { return info_; }

  // Tokens [first, first + count) of the stream into out, sequence by sequence.
  void tokens(std::int64_t first, std::int64_t count, std::int64_t* out) const {
    auto s = static_cast<std::size_t>(
        std::upper_bound(index_.starts.begin(), index_.starts.end(), first) -
        index_.starts.begin() - 1);
    while (count > 0) {
      const std::int64_t offset = first - index_.starts[s];
      const std::int64_t take = std::min(count, index_.starts[s + 1] - first);
      if (take > 0) {
        const auto pointer = load<std::int64_t>(index_.pointers + s * 8);
        widen_any(index_.type.bytes, is_signed_,
                  bin_->data() + pointer + offset * index_.type.bytes, take, out);
        out += take;
        first += take;
        count -= take;
      }
      ++s;
    }
  }

  Batch read(const std::vector<std::int64_t>& indices) override {
    const std::int64_t seq_len = info_.seq_len;
    sort_request(indices, info_.num_samples, where_);  // range check, one message
    const auto batch = static_cast<std::int64_t>(indices.size());
    Batch out;
    out.indices = indices;
    out.inputs = torch::empty({batch, seq_len}, torch::kLong);
    out.targets = torch::empty({batch, seq_len}, torch::kLong);
    std::int64_t* inputs = out.inputs.data_ptr<std::int64_t>();
    std::int64_t* targets = out.targets.data_ptr<std::int64_t>();
    window_.resize(static_cast<std::size_t>(seq_len + 1));
    for (std::int64_t k = 0; k < batch; ++k) {
      const std::int64_t sample = indices[static_cast<std::size_t>(k)];
      tokens(sample * seq_len, seq_len + 1, window_.data());
      for (const std::int64_t token : window_) {
        if (token < 0 || token >= info_.vocab_size) {
          throw DataError(str(where_, ": token id ", token, " in sample ", sample,
                              " is outside [0, ", info_.vocab_size,
                              "): the file changed after it was opened?"));
        }
      }
      std::copy(window_.begin(), window_.end() - 1, inputs + k * seq_len);
      std::copy(window_.begin() + 1, window_.end(), targets + k * seq_len);
    }
    return out;
  }

 private:
  std::unique_ptr<MappedFile> idx_;
  std::unique_ptr<MappedFile> bin_;
  MegatronIndex index_;
  DatasetInfo info_;
  std::string where_;
  bool is_signed_;
  std::vector<std::int64_t> window_;
};

}  // namespace

std::unique_ptr<Dataset> open_megatron(const std::string& prefix, const DatasetExpectation& expect,
                                       const ReadOptions& options) {
  const std::string key = expect.config_key.empty() ? "data" : expect.config_key;
  const std::string label = str(key, " Megatron dataset '", clip(prefix), "'");
  if (prefix.empty()) {
    throw DataError(str(label, ": no prefix given: set path to PREFIX of PREFIX.bin/PREFIX.idx"));
  }
  auto idx = std::make_unique<MappedFile>();
  auto bin = std::make_unique<MappedFile>();
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  idx->open(idx_path, label);
  bin->open(bin_path, label);
  const std::string where = str(label, ", index '", clip(idx_path), "'");
  MegatronIndex index = parse_index(*idx, *bin, where, str("'", clip(bin_path), "'"));

  if (expect.seq_len <= 0) {
    throw DataError(str(label,
                        " holds a token stream (language modelling), but the run gave no "
                        "sequence length: train a language model on it (its model sets seq_len)"));
  }
  // The format records no vocabulary: the model's (the run passes model.vocab_size).
  const std::int64_t vocab_size = expect.vocab_size;
  if (vocab_size <= 0) {
    throw DataError(str(label,
                        ": a Megatron dataset does not record its vocabulary size: set the "
                        "model's vocab_size (the tokenizer's vocabulary)"));
  }
  const std::int64_t num_tokens = index.starts.back();
  const std::int64_t seq_len = expect.seq_len;
  const std::int64_t num_samples = token_windows(num_tokens, seq_len, label);
  require_token_batch(label, num_samples, seq_len, num_tokens, expect.min_samples);
  DatasetInfo info = token_stream_info(prefix, num_samples, seq_len, index.type.name, vocab_size,
                                       num_tokens, index.type.bytes);
  const std::string bin_where = str(label, ", '", clip(bin_path), "'");
  auto dataset = std::make_unique<MegatronDataset>(std::move(idx), std::move(bin), std::move(index),
                                                   std::move(info), bin_where);
  if (!options.trusted) {
    // One pass over the stream: every id must index the embedding.
    std::vector<std::int64_t> block;
    constexpr std::int64_t kBlock = std::int64_t{1} << 20;
    for (std::int64_t begin = 0; begin < num_tokens; begin += kBlock) {
      const std::int64_t count = std::min(kBlock, num_tokens - begin);
      block.resize(static_cast<std::size_t>(count));
      dataset->tokens(begin, count, block.data());
      check_token_ids(block.data(), count, begin, vocab_size, bin_where,
                      " of the model (model.vocab_size): set vocab_size to the tokenizer's, or "
                      "prepare the data with the model's tokenizer");
    }
  }
  return dataset;
}

}  // namespace hpctrain::data::detail
