#pragma once
// `hpctrain prepare`: converts public data into dataset files (docs/DATA.md). Each function
// writes its files atomically (temporary name, then rename) and is local: under mpirun the
// command runs it on one rank only.

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::data {

/// One written file: its path, what it holds, and how many samples or tokens.
struct PreparedFile {
  std::string path;
  std::string what;  ///< "60000 images, 10 classes", "2012345 tokens"
  std::int64_t count = 0;
};

/// The directory holding Debian's dataset-fashion-mnist IDX files, found through
/// `dpkg -L dataset-fashion-mnist`, else /usr/share/datasets/fashion-mnist. Throws DataError
/// saying how to install them or to pass --from. Local.
std::string find_fashion_mnist_dir();

/// Reads train-{images-idx3,labels-idx1}-ubyte.gz and t10k-* from `from_dir` (.gz or plain),
/// validates magic numbers, counts, 28x28 images and labels 0..9, and writes `out_dir`/train.h5
/// and `out_dir`/test.h5: /inputs uint8 N x 1 x 28 x 28 (scale 1/255), /labels int64 N,
/// num_classes 10. `created_by` goes into the files. Local.
std::vector<PreparedFile> prepare_fashion_mnist(const std::string& from_dir,
                                                const std::string& out_dir,
                                                const std::string& created_by);

/// `hpctrain prepare text`: UTF-8 text files to token files. Local value type.
struct TextPrepareOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  /// The tail of each file (from the line break after the cut) goes to val.h5; 0: train.h5 only.
  double val_fraction = 0.1;
  std::string tokenizer = "bytes";  ///< what load_tokenizer (tokenizer.hpp) takes
  /// Where documents end, each followed by the tokenizer's end-of-text token: "file" (each
  /// file's train and val parts), "blank-line" (paragraphs; the blank lines are dropped) or
  /// "none" (files concatenated, no token between). "" = file when the tokenizer has an
  /// end-of-text token, else none.
  std::string doc_separator;
  std::string created_by;
};

/// Tokenizes the inputs into `out_dir`/train.h5 (and val.h5 unless val_fraction is 0): /tokens
/// uint16 for a vocabulary up to 65536, else uint32, with attributes vocab_size (the tokenizer's)
/// and tokenizer (its identity). Each rank of `world` reads every file and encodes a contiguous
/// share of the documents (by bytes); world rank 0 gathers the ids in document order and writes
/// the files, so they are the same at any rank count. Throws DataError for a missing file,
/// invalid UTF-8 (with the byte offset), a bad tokenizer or a split left empty; ConfigError for
/// bad options. Collective over `world` (nullptr: this process alone).
std::vector<PreparedFile> prepare_text(const TextPrepareOptions& options,
                                       comm::ControlPlane* world);

/// Byte-level tokens, one rank, one document per file part: the same as prepare_text with
/// tokenizer "bytes", doc_separator "none". Local.
std::vector<PreparedFile> prepare_text(const std::vector<std::string>& inputs,
                                       const std::string& out_dir, double val_fraction,
                                       const std::string& created_by);

/// `hpctrain prepare tokens`: token files (llm.c .bin, .npy, raw little-endian arrays) to
/// language-modelling files. Local value type.
struct TokenPrepareOptions {
  std::vector<std::string> inputs;
  std::string out_dir;
  std::string format = "auto";  ///< auto, npy, llmc or raw (every input)
  std::string dtype;            ///< raw files: uint16 (default), uint32 or int32
  std::int64_t vocab = 0;       ///< vocabulary size (required): ids must lie in [0, vocab)
  std::int64_t shard_size = 0;  ///< tokens per output file; 0 = one train.h5 (and val.h5)
  double val_fraction = 0;      ///< the last fraction of each input goes to validation
  std::string created_by;
  int rank = 0;  ///< this process's share: outputs rank, rank + ranks, ...
  int ranks = 1;
};

/// Checks every input's header and length first (a truncated or mis-typed file is a DataError
/// naming its byte offset, before anything is written), then writes this rank's output files
/// (train.h5 / val.h5, or train-NNNNN.h5 / val-NNNNN.h5 of shard_size tokens each, the inputs
/// concatenated in the order given), each under a temporary name, renamed when complete. Output
/// ids are uint16 for a vocabulary up to 65536, else int32. Local.
std::vector<PreparedFile> prepare_tokens(const TokenPrepareOptions& options);

/// `hpctrain prepare numpy`: .npy arrays to classification or regression files.
struct NumpyPrepareOptions {
  std::string inputs;   ///< (N, ...) uint8, float32 or float64 (stored as float32)
  std::string labels;   ///< (N,) integers: classification
  std::string targets;  ///< (N, ...) float32 or float64: regression
  std::string out_dir;
  std::int64_t num_classes = 0;  ///< 0 = the largest label + 1
  std::int64_t shard_size = 0;   ///< samples per output file; 0 = one train.h5 (and val.h5)
  double val_fraction = 0;       ///< the last fraction of the samples goes to validation
  std::string created_by;
  int rank = 0;
  int ranks = 1;
};

/// Checks both headers and the labels, then writes this rank's output files as prepare_tokens
/// does. Local.
std::vector<PreparedFile> prepare_numpy(const NumpyPrepareOptions& options);

}  // namespace hpctrain::data
