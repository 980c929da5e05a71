#pragma once
// `hpctrain prepare`: converts public data into dataset files (docs/DATA.md). Each function
// writes its files atomically (temporary name, then rename) and is local: under mpirun the
// command runs it on one rank only.

#include <cstdint>
#include <string>
#include <vector>

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

/// Byte-level tokenization of UTF-8 text files (vocabulary 256, token = byte). The last
/// `val_fraction` of each file (cut at the next line break) goes to `out_dir`/val.h5, the rest to
/// `out_dir`/train.h5, both /tokens uint16 with vocab_size 256 and tokenizer "bytes". Throws
/// DataError for a missing file, invalid UTF-8 (with the byte offset) or a split left empty.
/// Local.
std::vector<PreparedFile> prepare_text(const std::vector<std::string>& inputs,
                                       const std::string& out_dir, double val_fraction,
                                       const std::string& created_by);

}  // namespace hpctrain::data
