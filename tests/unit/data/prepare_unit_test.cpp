// prepare: IDX parsing and its errors, Fashion-MNIST conversion read back sample by sample
// (synthetic IDX files, and the real ones when dataset-fashion-mnist is installed), byte-level
// text tokenization, and the data config section.

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <zlib.h>

#include <fstream>

#include "hpctrain/data/data_config.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/idx_file.hpp"
#include "hpctrain/data/inspect.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/config.hpp"
#include "test_util.hpp"

namespace hpctrain::data {
namespace {

using testing::error_of;
using testing::make_temp_dir;

std::vector<std::uint8_t> idx_bytes(std::vector<std::uint32_t> dims,
                                    const std::vector<std::uint8_t>& data,
                                    std::uint32_t magic = 0) {
  std::vector<std::uint8_t> out{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  if (magic) {
    out = {static_cast<std::uint8_t>(magic >> 24), static_cast<std::uint8_t>(magic >> 16),
           static_cast<std::uint8_t>(magic >> 8), static_cast<std::uint8_t>(magic)};
  }
  for (auto d : dims) {
    out.insert(out.end(), {static_cast<std::uint8_t>(d >> 24), static_cast<std::uint8_t>(d >> 16),
                           static_cast<std::uint8_t>(d >> 8), static_cast<std::uint8_t>(d)});
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

// A small Fashion-MNIST-shaped release: n images of 28x28 with pixel (i, p) = (i + 3p) mod 256.
void write_release(const std::string& dir, std::uint32_t n_train, std::uint32_t n_test) {
  for (auto [prefix, n] : {std::pair<std::string, std::uint32_t>{"train", n_train},
                           std::pair<std::string, std::uint32_t>{"t10k", n_test}}) {
    std::vector<std::uint8_t> pixels(n * 784), labels(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      for (std::uint32_t p = 0; p < 784; ++p)
        pixels[i * 784 + p] = static_cast<std::uint8_t>(i + 3 * p);
      labels[i] = static_cast<std::uint8_t>((i * 7) % 10);
    }
    write_gz(dir + "/" + prefix + "-images-idx3-ubyte.gz", idx_bytes({n, 28, 28}, pixels));
    write_gz(dir + "/" + prefix + "-labels-idx1-ubyte.gz", idx_bytes({n}, labels));
  }
}

// Checks that every sample of `h5` equals the IDX source exactly: labels as int64, pixels as
// float32(value * (1/255)).
void expect_matches_idx(const std::string& h5, const std::string& images_idx,
                        const std::string& labels_idx) {
  IdxArray images = read_idx(images_idx, 3);
  IdxArray labels = read_idx(labels_idx, 1);
  auto dataset = Dataset::open(h5);
  const std::int64_t n = images.dims[0];
  ASSERT_EQ(dataset->info().num_samples, n);
  EXPECT_EQ(dataset->info().sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(dataset->info().num_classes, 10);
  auto pixels = torch::from_blob(images.data.data(), {n, 1, 28, 28}, torch::kByte);
  auto want_x = (pixels.to(torch::kDouble) * (1.0 / 255.0)).to(torch::kFloat);
  auto want_y = torch::from_blob(labels.data.data(), {n}, torch::kByte).to(torch::kLong);
  for (std::int64_t begin = 0; begin < n; begin += 10000) {
    const std::int64_t end = std::min(n, begin + 10000);
    Batch b = dataset->read_range(begin, end);
    ASSERT_TRUE(torch::equal(b.inputs, want_x.slice(0, begin, end))) << h5 << " from " << begin;
    ASSERT_TRUE(torch::equal(b.targets, want_y.slice(0, begin, end))) << h5 << " from " << begin;
  }
}

TEST(IdxFile, ReadsGzipAndPlainFiles) {
  const std::string dir = make_temp_dir();
  write_gz(dir + "/a.gz", idx_bytes({2, 3}, {1, 2, 3, 4, 5, 6}));
  auto bytes = idx_bytes({3}, {7, 8, 9});
  std::ofstream(dir + "/b", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  IdxArray a = read_idx(dir + "/a.gz", 2);
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(read_idx(dir + "/b", 1).data, (std::vector<std::uint8_t>{7, 8, 9}));
}

TEST(IdxFile, BadFilesNameTheFileAndTheProblem) {
  const std::string dir = make_temp_dir();
  write_gz(dir + "/magic.gz", idx_bytes({3}, {1, 2, 3}, 0x00000D01));
  write_gz(dir + "/short.gz", idx_bytes({4}, {1, 2, 3}));
  write_gz(dir + "/long.gz", idx_bytes({2}, {1, 2, 3}));
  write_gz(dir + "/header.gz", {0, 0, 8, 3, 0, 0});
  // A gzip stream cut in half.
  write_gz(dir + "/full.gz", idx_bytes({5000}, std::vector<std::uint8_t>(5000, 1)));
  std::ifstream in(dir + "/full.gz", std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(dir + "/cut.gz", std::ios::binary)
      .write(gz.data(), static_cast<std::streamsize>(gz.size() / 2));

  EXPECT_HAS(error_of([&] { read_idx(dir + "/magic.gz", 1); }),
             "'" + dir + "/magic.gz' has magic number 0x00000D01, expected 0x00000801");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/magic.gz", 3); }), "expected 0x00000803");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/short.gz", 1); }),
             "is truncated: its header promises 4 = 4 bytes of data, the file holds 3");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/long.gz", 1); }), "is too long");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/header.gz", 3); }), "truncated inside its header");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/cut.gz", 1); }), "'" + dir + "/cut.gz' is truncated");
  EXPECT_HAS(error_of([&] { read_idx(dir + "/none.gz", 1); }),
             "'" + dir + "/none.gz' does not exist");
}

TEST(PrepareFashionMnist, SyntheticReleaseRoundTrip) {
  const std::string from = make_temp_dir(), out = make_temp_dir() + "/out";
  write_release(from, 300, 70);
  auto files = prepare_fashion_mnist(from, out, "unit test");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].path, out + "/train.h5");
  EXPECT_EQ(files[0].count, 300);
  EXPECT_EQ(files[1].path, out + "/test.h5");
  EXPECT_EQ(files[1].count, 70);
  expect_matches_idx(out + "/train.h5", from + "/train-images-idx3-ubyte.gz",
                     from + "/train-labels-idx1-ubyte.gz");
  expect_matches_idx(out + "/test.h5", from + "/t10k-images-idx3-ubyte.gz",
                     from + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(Dataset::open(out + "/train.h5")->info().chunk_shape,
            (std::vector<std::int64_t>{128, 1, 28, 28}));
  std::string described = describe_data_file(out + "/train.h5");
  EXPECT_HAS(described, "created_by");
  EXPECT_HAS(described, "unit test");
  EXPECT_HAS(described, "chunks (128, 1, 28, 28)");
  EXPECT_HAS(described, "valid     yes");
  // Another object in the file is listed by its kind, not read (inspect asks the kind through
  // H5Oopen and H5Iget_type, the same in HDF5 1.10 and 1.14).
  {
    const hid_t file = H5Fopen((out + "/train.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    const hid_t group = H5Gcreate2(file, "extras", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(group, 0);
    H5Gclose(group);
    H5Fclose(file);
  }
  described = describe_data_file(out + "/train.h5");
  EXPECT_HAS(described, "/extras  (group, not read)");
  EXPECT_HAS(described, "chunks (128, 1, 28, 28)");
}

TEST(PrepareFashionMnist, BadReleasesWriteNothing) {
  const std::string from = make_temp_dir(), out = make_temp_dir() + "/out";
  write_release(from, 20, 10);
  // Test labels for 9 images only.
  write_gz(from + "/t10k-labels-idx1-ubyte.gz", idx_bytes({9}, std::vector<std::uint8_t>(9, 1)));
  EXPECT_HAS(error_of([&] { prepare_fashion_mnist(from, out, "t"); }), "10 images but 9 labels");
  struct stat st {};
  EXPECT_NE(::stat((out + "/train.h5").c_str(), &st), 0) << "train.h5 written despite the error";
  write_gz(from + "/t10k-labels-idx1-ubyte.gz", idx_bytes({10}, std::vector<std::uint8_t>(10, 12)));
  EXPECT_HAS(error_of([&] { prepare_fashion_mnist(from, out, "t"); }),
             "label 12 at index 0 is outside 0..9");
  write_gz(from + "/t10k-images-idx3-ubyte.gz",
           idx_bytes({10, 27, 28}, std::vector<std::uint8_t>(7560)));
  EXPECT_HAS(error_of([&] { prepare_fashion_mnist(from, out, "t"); }),
             "27 x 28 images, expected 28 x 28");
  EXPECT_HAS(error_of([&] { prepare_fashion_mnist(make_temp_dir(), out, "t"); }),
             "train-images-idx3-ubyte.gz' does not exist");
}

TEST(PrepareFashionMnist, RealReleaseRoundTrip) {
  std::string from;
  try {
    from = find_fashion_mnist_dir();
  } catch (const DataError& e) {
    GTEST_SKIP() << e.what();
  }
  const std::string out = make_temp_dir();
  auto files = prepare_fashion_mnist(from, out, "unit test");
  EXPECT_EQ(files[0].count, 60000);
  EXPECT_EQ(files[1].count, 10000);
  expect_matches_idx(out + "/train.h5", from + "/train-images-idx3-ubyte.gz",
                     from + "/train-labels-idx1-ubyte.gz");
  expect_matches_idx(out + "/test.h5", from + "/t10k-images-idx3-ubyte.gz",
                     from + "/t10k-labels-idx1-ubyte.gz");
}

TEST(PrepareText, ByteTokensSplitAtLineBreaks) {
  const std::string dir = make_temp_dir();
  std::ofstream(dir + "/a.txt") << "first line\nsecond line\nthird line\nfourth line\n";
  std::ofstream(dir + "/b.txt") << "caf\xC3\xA9 \xE2\x82\xAC\nlast\n";
  auto files = prepare_text({dir + "/a.txt", dir + "/b.txt"}, dir + "/out", 0.4, "unit test");
  ASSERT_EQ(files.size(), 2u);
  // a.txt (46 bytes): the cut at byte 28 moves to the next line end (byte 34), so its val part is
  // "fourth line\n"; b.txt (15 bytes): the cut at byte 9 is a line break, val gets "last\n".
  const std::string train = "first line\nsecond line\nthird line\ncaf\xC3\xA9 \xE2\x82\xAC\n";
  const std::string val = "fourth line\nlast\n";
  EXPECT_EQ(files[0].count, static_cast<std::int64_t>(train.size()));
  EXPECT_EQ(files[1].count, static_cast<std::int64_t>(val.size()));
  DatasetExpectation expect;
  expect.seq_len = 4;
  for (auto [path, text] : {std::pair<std::string, std::string>{files[0].path, train},
                            std::pair<std::string, std::string>{files[1].path, val}}) {
    auto dataset = Dataset::open(path, expect);
    EXPECT_EQ(dataset->info().vocab_size, 256);
    EXPECT_EQ(dataset->info().num_tokens, static_cast<std::int64_t>(text.size()));
    Batch b = dataset->read({0, 1});
    for (std::int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(b.inputs.view({-1})[t].item<std::int64_t>(),
                static_cast<unsigned char>(text[static_cast<std::size_t>(t)]));
    }
  }
  InspectOptions inspect;
  inspect.seq_len = 4;
  std::string described = describe_data_file(files[1].path, inspect);
  EXPECT_HAS(described, "\"four\"");
  EXPECT_HAS(described, "\"ine\\n\"");
}

TEST(PrepareText, RejectsBadInput) {
  const std::string dir = make_temp_dir();
  std::ofstream(dir + "/latin1.txt") << "ok line\nna\xEFve\n";
  std::ofstream(dir + "/tiny.txt") << "x";
  EXPECT_HAS(error_of([&] { prepare_text({dir + "/latin1.txt"}, dir + "/o", 0.1, "t"); }),
             "'" + dir + "/latin1.txt' is not UTF-8 text: invalid byte 0xef at offset 10");
  EXPECT_HAS(error_of([&] { prepare_text({dir + "/missing.txt"}, dir + "/o", 0.1, "t"); }),
             "'" + dir + "/missing.txt' does not exist");
  EXPECT_HAS(error_of([&] { prepare_text({dir + "/tiny.txt"}, dir + "/o", 0.5, "t"); }),
             "split would hold");
  EXPECT_HAS(
      error_of<ConfigError>([&] { prepare_text({dir + "/tiny.txt"}, dir + "/o", 1.5, "t"); }),
      "--val-fraction 1.5");
}

TEST(DataConfig, ReadsKeysWithDefaultsAndNamesBadOnes) {
  Config config =
      Config::parse("data:\n  train: a.h5\n  batch_size: 32\n  prefetch: 0\n", "t.yaml");
  auto section = config.section("data");
  DataConfig data = DataConfig::from(section);
  EXPECT_EQ(data.train, "a.h5");
  EXPECT_EQ(data.val, "");
  EXPECT_EQ(data.batch_size, 32);
  EXPECT_TRUE(data.shuffle);
  EXPECT_EQ(data.prefetch, 0);
  EXPECT_EQ(data.read_options().chunk_cache_bytes, 0u);
  EXPECT_NO_THROW(config.check_unknown_keys());

  for (auto [yaml, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"data:\n  batch_size: 0\n", "data.batch_size = '0': must be at least 1"},
           {"data:\n  prefetch: -1\n", "data.prefetch = '-1': must be 0"},
           {"data:\n  shuffle: maybe\n", "data.shuffle = 'maybe'"},
           {"data:\n  chunk_cache: lots\n", "data.chunk_cache"}}) {
    Config bad = Config::parse(yaml, "t.yaml");
    auto s = bad.section("data");
    EXPECT_HAS(error_of<ConfigError>([&] { DataConfig::from(s); }), fragment);
  }
  Config cache = Config::parse("data:\n  chunk_cache: 16M\n", "t.yaml");
  auto s = cache.section("data");
  EXPECT_EQ(DataConfig::from(s).read_options().chunk_cache_bytes, 16u << 20);
}

}  // namespace
}  // namespace hpctrain::data
