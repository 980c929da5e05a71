#pragma once
// Writes dataset files in the documented layout (docs/DATA.md): chunked for random access by
// sample, with schema_version, kind, source, created_by and created_at attributes. The file
// appears under its final name only once complete (written to a temporary name, then renamed).

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::data {

/// Where a file came from; stored as attributes source and created_by.
struct Provenance {
  std::string source;      ///< e.g. "Fashion-MNIST IDX files in /usr/share/datasets/fashion-mnist"
  std::string created_by;  ///< e.g. "hpctrain 0.1.0: hpctrain prepare fashion-mnist --out data"
};

/// Samples per chunk for rows of `sample_bytes`: the largest power of two whose chunk stays
/// within 128 KiB (at least 1). A random sample read then pulls at most one such chunk from
/// disk, and the reader's chunk cache holds many. Fashion-MNIST (784 B): 128 images. Local.
std::int64_t samples_per_chunk(std::int64_t sample_bytes);

/// Writes a classification file: `inputs` uint8 or float32 [N, ...], `labels` int64 [N] with
/// values in [0, num_classes). `scale` is stored as the /inputs attribute scale (the reader
/// multiplies by it). Throws DataError naming the path on failure. Local.
void write_classification_file(const std::string& path, const torch::Tensor& inputs,
                               const torch::Tensor& labels, std::int64_t num_classes, double scale,
                               const Provenance& provenance);

/// Writes a regression file: float32 `inputs` [N, ...] and `targets` [N, ...]. Local.
void write_regression_file(const std::string& path, const torch::Tensor& inputs,
                           const torch::Tensor& targets, const Provenance& provenance);

/// Writes a language-modelling file: /tokens as uint16 with attributes vocab_size and
/// tokenizer. Local.
void write_token_file(const std::string& path, const std::vector<std::uint16_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance);
/// The same with uint32 token ids (vocabularies beyond 65536: prepare text). Local.
void write_token_file(const std::string& path, const std::vector<std::uint32_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance);
/// The same with int32 token ids (vocabularies beyond 65536). Local.
void write_token_file(const std::string& path, const std::vector<std::int32_t>& tokens,
                      std::int64_t vocab_size, const std::string& tokenizer,
                      const Provenance& provenance);

}  // namespace hpctrain::data
