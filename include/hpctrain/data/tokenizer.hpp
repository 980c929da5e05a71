#pragma once
// Tokenizers: text to token ids and back, in C++ with no Python at run time (docs/DATA.md,
// "Tokenizers"). One interface for the byte-level vocabulary of 256 and for byte-level BPE
// vocabularies read from a Hugging Face tokenizer.json, GPT-2's encoder.json + vocab.bpe, or a
// tiktoken rank file (cl100k_base, o200k_base, gpt2/r50k_base). `prepare text` writes token files
// with one; `generate` and evaluation decode with the run's (data.tokenizer).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hpctrain::data {

/// A loaded vocabulary. Immutable after loading; encode and decode may be called from several
/// threads at once. Every method is local.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Token ids of `text` (UTF-8). Adds no special tokens (no BOS/EOS); special and added tokens
  /// written literally in the text ("<|endoftext|>") are recognised as the source library does by
  /// default (tiktoken files: as tiktoken's allowed_special="all"). Local.
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;

  /// The bytes the ids stand for, concatenated (special tokens as their text). For text that
  /// encode() accepted, decode(encode(text)) == text (after the tokenizer's normalizer, if any).
  /// Throws DataError for an id outside [0, vocab_size()) or one that names no token. Local.
  virtual std::string decode(const std::vector<std::int64_t>& ids) const = 0;

  /// One more than the largest id (base vocabulary and added/special tokens): the smallest
  /// model.vocab_size that can embed every id. Local.
  virtual std::int64_t vocab_size() const = 0;

  /// The end-of-text token (the document separator `prepare text` writes), or nullopt when the
  /// vocabulary has none (bytes). Local.
  virtual std::optional<std::int64_t> eot_id() const = 0;

  /// The id of a special or added token given by its text ("<|im_end|>"), for stop tokens;
  /// nullopt when the vocabulary has no such token. Local.
  virtual std::optional<std::int64_t> token_id(std::string_view token) const = 0;

  /// What token files record as their tokenizer: the kind, the file name and a hash of the
  /// content, e.g. "tiktoken:cl100k_base.tiktoken:xxh64=5d2f...", or "bytes". Two tokenizers
  /// with the same identity give the same ids. Local.
  virtual std::string identity() const = 0;
};

/// Loads the tokenizer that `spec` names:
/// - `bytes`: the byte-level vocabulary of 256 (token = byte);
/// - a `tokenizer.json` file (Hugging Face, byte-level BPE), or a directory holding one;
/// - a directory holding GPT-2's `encoder.json` and `vocab.bpe`;
/// - a tiktoken rank file `NAME.tiktoken` (base64 token, space, rank per line), whose NAME
///   (cl100k_base, o200k_base, gpt2 or r50k_base) decides its split pattern and special tokens.
/// Every path is checked before it is opened (a FIFO or directory in place of a file is refused).
/// Throws DataError (exit 3) naming the file and the field for anything missing or malformed.
/// Local.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace hpctrain::data
