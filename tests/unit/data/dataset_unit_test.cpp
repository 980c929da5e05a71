// Dataset files: written by hpctrain's writer or by h5py in the documented layout, read back by
// global index (any order, duplicates), and every kind of bad file refused with its message.

#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "test_util.hpp"

namespace hpctrain::data {
namespace {

using testing::error_of;
using testing::h5py_files;
using testing::make_temp_dir;

const Provenance kTest{"unit test", "dataset_unit_test"};

// Images whose pixels encode their index: pixel e of image i = (3 i + e) mod 256.
torch::Tensor index_images(std::int64_t n) {
  auto i = torch::arange(n, torch::kLong).view({n, 1, 1, 1});
  auto e = torch::arange(2 * 3 * 5, torch::kLong).view({1, 2, 3, 5});
  return ((3 * i + e) % 256).to(torch::kByte);
}

torch::Tensor scaled(const torch::Tensor& bytes, double scale) {
  // The reader's definition: float32(value * scale), the product taken in double.
  return (bytes.to(torch::kDouble) * scale).to(torch::kFloat);
}

TEST(Dataset, ClassificationRoundTripInAnyOrderWithDuplicates) {
  const std::string path = make_temp_dir() + "/c.h5";
  const std::int64_t n = 300;
  auto images = index_images(n);
  auto labels = torch::arange(n, torch::kLong) % 7;
  write_classification_file(path, images, labels, 7, 1.0 / 255.0, kTest);

  auto dataset = Dataset::open(path);
  const DatasetInfo& info = dataset->info();
  EXPECT_EQ(info.kind, DatasetKind::kClassification);
  EXPECT_EQ(info.num_samples, n);
  EXPECT_EQ(info.sample_shape, (std::vector<std::int64_t>{2, 3, 5}));
  EXPECT_EQ(info.input_dtype, "uint8");
  EXPECT_DOUBLE_EQ(info.input_scale, 1.0 / 255.0);
  EXPECT_EQ(info.num_classes, 7);
  EXPECT_EQ(info.sample_bytes, 30);
  // 128 KiB / 30 B -> 4096 samples per chunk, capped at the 300 samples there are.
  EXPECT_EQ(info.chunk_shape, (std::vector<std::int64_t>{300, 2, 3, 5}));
  EXPECT_GT(info.chunk_cache_bytes, 0u);

  std::vector<std::int64_t> indices{299, 0, 5, 6, 7, 5, 150, 1, 298, 299};
  Batch batch = dataset->read(indices);
  EXPECT_EQ(batch.indices, indices);
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<std::int64_t>{10, 2, 3, 5}));
  EXPECT_EQ(batch.inputs.scalar_type(), torch::kFloat);
  EXPECT_EQ(batch.targets.scalar_type(), torch::kLong);
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const auto i = indices[k];
    EXPECT_TRUE(
        torch::equal(batch.inputs[static_cast<std::int64_t>(k)], scaled(images[i], 1.0 / 255.0)))
        << "sample " << i;
    EXPECT_EQ(batch.targets[static_cast<std::int64_t>(k)].item<std::int64_t>(), i % 7);
  }
  Batch range = dataset->read_range(10, 20);
  EXPECT_TRUE(torch::equal(range.inputs, scaled(images.slice(0, 10, 20), 1.0 / 255.0)));
  EXPECT_TRUE(torch::equal(range.targets, labels.slice(0, 10, 20)));
  EXPECT_EQ(dataset->read({}).size(), 0);

  // The same reads with labels read from the file batch by batch (files beyond 8 Mi samples).
  ReadOptions from_file;
  from_file.max_labels_in_memory = 0;
  auto streamed = Dataset::open(path, {}, from_file);
  Batch again = streamed->read(indices);
  EXPECT_TRUE(torch::equal(again.inputs, batch.inputs));
  EXPECT_TRUE(torch::equal(again.targets, batch.targets));
}

TEST(Dataset, Float32InputsAndChunkCacheOption) {
  const std::string path = make_temp_dir() + "/f.h5";
  auto inputs = torch::randn({40, 6});
  auto labels = torch::arange(40, torch::kLong) % 4;
  write_classification_file(path, inputs, labels, 4, 1.0, kTest);
  ReadOptions options;
  options.chunk_cache_bytes = 1 << 20;
  auto dataset = Dataset::open(path, {}, options);
  EXPECT_EQ(dataset->info().input_dtype, "float32");
  EXPECT_EQ(dataset->info().chunk_cache_bytes, 1u << 20);
  EXPECT_TRUE(torch::equal(dataset->read_range(0, 40).inputs, inputs));
  Batch b = dataset->read({3, 1});
  EXPECT_TRUE(torch::equal(b.inputs[0], inputs[3]));
  EXPECT_TRUE(torch::equal(b.inputs[1], inputs[1]));
}

TEST(Dataset, TokenWindowsShiftTargetsByOne) {
  const std::string dir = make_temp_dir();
  std::vector<std::uint16_t> tokens16(1001);
  std::vector<std::int32_t> tokens32(1001);
  for (std::size_t t = 0; t < tokens16.size(); ++t) {
    tokens16[t] = static_cast<std::uint16_t>(t % 256);
    tokens32[t] = static_cast<std::int32_t>((t * 7) % 70000);
  }
  write_token_file(dir + "/t16.h5", tokens16, 256, "bytes", kTest);
  write_token_file(dir + "/t32.h5", tokens32, 70000, "test", kTest);
  DatasetExpectation expect;
  expect.seq_len = 10;
  for (const std::string name : {"t16", "t32"}) {
    auto dataset = Dataset::open(dir + "/" + name + ".h5", expect);
    const DatasetInfo& info = dataset->info();
    EXPECT_EQ(info.kind, DatasetKind::kLanguageModel);
    EXPECT_EQ(info.num_tokens, 1001);
    EXPECT_EQ(info.num_samples, 100);  // (1001 - 1) / 10 windows
    EXPECT_EQ(info.seq_len, 10);
    EXPECT_EQ(info.sample_shape, (std::vector<std::int64_t>{10}));
    auto token = [&](std::int64_t t) -> std::int64_t {
      return name == std::string("t16") ? tokens16[static_cast<std::size_t>(t)]
                                        : tokens32[static_cast<std::size_t>(t)];
    };
    std::vector<std::int64_t> indices{99, 0, 1, 2, 50, 1, 98};
    Batch batch = dataset->read(indices);
    ASSERT_EQ(batch.inputs.sizes(), (std::vector<std::int64_t>{7, 10}));
    ASSERT_EQ(batch.targets.sizes(), (std::vector<std::int64_t>{7, 10}));
    for (std::size_t k = 0; k < indices.size(); ++k) {
      for (std::int64_t t = 0; t < 10; ++t) {
        const auto row = static_cast<std::int64_t>(k);
        EXPECT_EQ(batch.inputs[row][t].item<std::int64_t>(), token(indices[k] * 10 + t));
        EXPECT_EQ(batch.targets[row][t].item<std::int64_t>(), token(indices[k] * 10 + t + 1));
      }
    }
  }
}

TEST(Dataset, ReadsFilesWrittenByH5py) {
  const std::string dir = h5py_files();
  auto c = Dataset::open(dir + "/h5py_classification.h5");
  EXPECT_EQ(c->info().num_samples, 50);
  EXPECT_EQ(c->info().num_classes, 5);
  EXPECT_EQ(c->info().chunk_shape, (std::vector<std::int64_t>{8, 1, 4, 4}));
  Batch b = c->read({49, 3, 3});
  for (std::int64_t k = 0; k < 3; ++k) {
    const std::int64_t i = b.indices[static_cast<std::size_t>(k)];
    auto want = ((7 * i + torch::arange(16, torch::kLong)) % 256).to(torch::kByte).view({1, 4, 4});
    EXPECT_TRUE(torch::equal(b.inputs[k], scaled(want, 1.0 / 255.0))) << i;
    EXPECT_EQ(b.targets[k].item<std::int64_t>(), i % 5);
  }

  auto f = Dataset::open(dir + "/h5py_float.h5");
  EXPECT_EQ(f->info().num_classes, 3);  // no attribute: max label + 1
  EXPECT_TRUE(f->info().chunk_shape.empty());
  EXPECT_DOUBLE_EQ(f->info().input_scale, 1.0);
  Batch fb = f->read({19, 2});
  EXPECT_EQ(fb.inputs[0][2].item<float>(), 192.0f);
  EXPECT_EQ(fb.inputs[1][0].item<float>(), 20.0f);
  EXPECT_EQ(fb.targets[0].item<std::int64_t>(), 1);

  DatasetExpectation lm;
  lm.seq_len = 16;
  auto t16 = Dataset::open(dir + "/h5py_tokens_uint16.h5", lm);
  EXPECT_EQ(t16->info().vocab_size, 256);
  Batch tb = t16->read({3});
  EXPECT_EQ(tb.inputs[0][0].item<std::int64_t>(), 48);
  EXPECT_EQ(tb.targets[0][15].item<std::int64_t>(), 64);
  auto t32 = Dataset::open(dir + "/h5py_tokens_int32.h5", lm);
  EXPECT_EQ(t32->info().vocab_size, 1000);  // root attribute
  EXPECT_EQ(t32->read({1}).inputs[0][1].item<std::int64_t>(), (3 * 17) % 1000);
}

struct BadCase {
  const char* file;
  std::vector<const char*> fragments;
  std::int64_t seq_len = 0;
};

TEST(Dataset, BadFilesAreClearErrors) {
  const std::string dir = h5py_files();
  const std::vector<BadCase> cases = {
      {"does_not_exist.h5", {"does not exist", "hpctrain prepare"}},
      {"bad_not_hdf5.h5", {"is not an HDF5 file", "starting with 'this is '"}},
      {"bad_missing_labels.h5", {"missing dataset /labels", "found /inputs"}},
      {"bad_missing_inputs.h5", {"missing dataset /inputs", "found /labels"}},
      {"bad_no_datasets.h5", {"expected datasets /inputs and /labels", "found /images"}},
      {"bad_inputs_rank.h5", {"dataset /inputs: expected rank >= 2", "found rank 1", "(10,)"}},
      {"bad_inputs_dtype.h5", {"dataset /inputs: expected dtype uint8", "found float64"}},
      {"bad_labels_dtype.h5", {"dataset /labels: expected dtype int64", "found float32"}},
      {"bad_labels_rank.h5", {"dataset /labels: expected rank 1", "found rank 2", "(10, 10)"}},
      {"bad_label_range.h5", {"dataset /labels: label 10 at index 9 is outside [0, 10)"}},
      {"bad_label_negative.h5", {"label -1 at index 4"}},
      {"bad_count_mismatch.h5", {"/labels holds 9 labels but /inputs holds 10 samples"}},
      {"bad_schema_version.h5", {"schema_version 99 is not supported"}},
      {"bad_token_vocab.h5", {"dataset /tokens: token id 300 at position 3", "[0, 256)"}, 4},
      {"bad_token_rank.h5", {"dataset /tokens: expected rank 1", "found rank 2"}, 4},
      {"bad_token_dtype.h5", {"expected dtype uint16, uint32 or int32", "found float32"}, 4},
      {"bad_token_no_vocab.h5", {"attribute vocab_size is missing"}, 4},
      {"h5py_tokens_uint16.h5", {"gave no sequence length"}, 0},
      {"h5py_tokens_uint16.h5",
       {"holds 1000 tokens, fewer than one window of seq_len + 1 = 1001"},
       1000},
  };
  for (const BadCase& c : cases) {
    DatasetExpectation expect;
    expect.seq_len = c.seq_len;
    expect.config_key = "data.train";
    const std::string path = dir + "/" + c.file;
    std::string message = error_of([&] { Dataset::open(path, expect); });
    EXPECT_HAS(message, "data.train file '" + path + "'");
    for (const char* fragment : c.fragments) EXPECT_HAS(message, fragment);
  }
}

TEST(Dataset, ExpectationsAreChecked) {
  const std::string dir = h5py_files();
  DatasetExpectation too_many;
  too_many.min_samples = 64;
  EXPECT_HAS(error_of([&] { Dataset::open(dir + "/tiny_classification.h5", too_many); }),
             "holds 10 samples, fewer than one global batch of 64");
  DatasetExpectation classes;
  classes.num_classes = 100;
  EXPECT_HAS(error_of([&] { Dataset::open(dir + "/tiny_classification.h5", classes); }),
             "num_classes = 10 but the model expects 100");
  DatasetExpectation vocab;
  vocab.seq_len = 8;
  vocab.vocab_size = 100;
  EXPECT_HAS(error_of([&] { Dataset::open(dir + "/h5py_tokens_uint16.h5", vocab); }),
             "vocab_size is 256 but the model has 100");
  auto ok = Dataset::open(dir + "/tiny_classification.h5");
  EXPECT_HAS(error_of([&] { ok->read({3, 10}); }), "sample index 10 (position 1");
  // A directory is a dataset of its *.h5 files (here: one of them is bad, and named).
  EXPECT_HAS(error_of([&] { Dataset::open(dir); }), "bad_");
  const std::string empty = dir + "/empty_dir";
  std::filesystem::create_directories(empty);
  EXPECT_HAS(error_of([&] { Dataset::open(empty); }), "is a directory without *.h5");
}

TEST(Dataset, BackgroundReadsAndOtherHdf5UsersShareTheLock) {
  // The prefetch thread reads while this thread opens files: HDF5 here is not thread-safe, so
  // this only works because both hold hdf5_mutex().
  const std::string dir = h5py_files();
  auto dataset = Dataset::open(dir + "/h5py_classification.h5");
  TrainSampler sampler(50, 10, 1, true);
  TrainLoader loader(*dataset, sampler, {}, 0, 1, 3, 200);
  std::thread opener([&] {
    for (int i = 0; i < 50; ++i) Dataset::open(dir + "/h5py_float.h5")->read({1, 2});
  });
  Batch batch;
  std::int64_t steps = 0;
  while (loader.next(batch)) {
    ASSERT_EQ(batch.size(), 10);
    ++steps;
  }
  opener.join();
  EXPECT_EQ(steps, 200);
  EXPECT_EQ(loader.state().global_step, 200);
}

}  // namespace
}  // namespace hpctrain::data
