#pragma once
// The tokenizer kinds behind load_tokenizer (tokenizer.hpp), each made from its files. Every path
// reaching these has been checked to be a regular file.

#include <memory>
#include <string>

#include "hpctrain/data/tokenizer.hpp"

namespace hpctrain::data::detail {

/// The byte-level vocabulary of 256. Local.
std::unique_ptr<Tokenizer> make_byte_tokenizer();

/// A Hugging Face tokenizer.json (byte-level BPE). Local.
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& json_path);

/// GPT-2's encoder.json + vocab.bpe. Local.
std::unique_ptr<Tokenizer> load_gpt2_tokenizer(const std::string& encoder_path,
                                               const std::string& merges_path);

/// A tiktoken rank file; its file name (cl100k_base, o200k_base, gpt2, r50k_base) chooses the
/// split pattern and the special tokens. Local.
std::unique_ptr<Tokenizer> load_tiktoken(const std::string& path);

/// The whole content of `path` (already checked to be a regular file); DataError naming `what`
/// and the path when it cannot be read. Local.
std::string read_whole_file(const std::string& path, const std::string& what);

/// "xxh64=<16 hex digits>" of `bytes`: the content part of a tokenizer's identity. Local.
std::string content_hash(const std::string& bytes);

}  // namespace hpctrain::data::detail
