// Checkpoints written by save_local (one process, no MPI): what they contain, and every kind of
// damage verify() detects, with its message, and the fallback choose_resume("auto") takes.

#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>

#include "checkpoint_test_util.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/compat/torch_compat.hpp"

namespace hpctrain::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::sample_content;

class CheckpointVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    run_dir_ = testing::make_temp_dir();
    first_ = save_local(run_dir_, sample_content(10));
    second_ = save_local(run_dir_, sample_content(20));
  }
  std::string path(const std::string& file) const { return second_ + "/" + file; }
  // resolve("auto") falls back to the first checkpoint, reporting why it skipped the second.
  void expect_fallback(const std::string& reason) {
    const Verification v = verify(second_);
    EXPECT_FALSE(v.ok);
    EXPECT_NE(v.reason.find(reason), std::string::npos) << v.reason;
    const ResumeChoice choice = choose_resume(run_dir_, "auto");
    ASSERT_TRUE(choice.path);
    EXPECT_EQ(*choice.path, first_);
    ASSERT_EQ(choice.skipped.size(), 1u);
    EXPECT_NE(choice.skipped[0].find(reason), std::string::npos) << choice.skipped[0];
    EXPECT_NE(choice.skipped[0].find("named by latest"), std::string::npos) << choice.skipped[0];
    const ResumeChoice named = choose_resume(run_dir_, second_);
    EXPECT_FALSE(named.path);
    EXPECT_NE(named.error.find(reason), std::string::npos) << named.error;
  }

  std::string run_dir_, first_, second_;
};

TEST_F(CheckpointVerify, LayoutAndManifest) {
  EXPECT_EQ(second_, run_dir_ + "/checkpoints/step_00000020");
  EXPECT_TRUE(verify(first_).ok) << verify(first_).reason;
  EXPECT_TRUE(verify(second_).ok) << verify(second_).reason;
  EXPECT_EQ(list_checkpoints(run_dir_), (std::vector<std::string>{second_, first_}));
  EXPECT_EQ(read_latest(run_dir_), second_);
  for (const char* f : {"model.h5", "optimizer.h5", "rng.h5", "config.yaml", "manifest.json"}) {
    EXPECT_TRUE(fs::exists(path(f))) << f;
  }
  const nlohmann::json m = read_manifest(second_);
  EXPECT_EQ(m.at("step"), 20);
  EXPECT_EQ(m.at("epoch"), 2);
  EXPECT_EQ(m.at("consumed_samples"), 20 * 64);
  EXPECT_EQ(m.at("world_size"), 1);
  EXPECT_EQ(m.at("grid").at("tp"), 1);
  EXPECT_EQ(m.at("hpctrain_version"), HPCTRAIN_VERSION);
  EXPECT_EQ(m.at("torch_version"), compat::torch_version());
  EXPECT_EQ(m.at("config_xxh3"), xxh3_hex("model:\n  name: mlp\n"));
  EXPECT_EQ(m.at("trainer_state").at("note"), "unit test");
  EXPECT_EQ(m.at("files").at("model.h5").at("bytes").get<std::uintmax_t>(),
            testing::file_size(path("model.h5")));
  const auto& t = m.at("tensors");
  EXPECT_EQ(t.at("model/fc1.weight").at("shape"), nlohmann::json({64, 33}));
  EXPECT_EQ(t.at("model/fc1.weight").at("dataset"), "/fc1.weight");
  EXPECT_EQ(t.at("model/emb.weight").at("dtype"), "bfloat16");
  EXPECT_EQ(t.at("model/head.weight").at("dtype"), "float16");
  EXPECT_EQ(t.at("optimizer/exp_avg/fc1.weight").at("file"), "optimizer.h5");
  EXPECT_EQ(t.at("optimizer/steps").at("shape"), nlohmann::json::array());
  EXPECT_EQ(m.at("rng").at("bytes"), 16);
  EXPECT_TRUE(m.at("metric").is_null());
  // No temporary directory or pointer is left behind.
  for (const auto& e : fs::directory_iterator(run_dir_ + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

TEST_F(CheckpointVerify, StoredTypesAreWhatH5pyExpects) {
  // float16 as an IEEE half (h5py: numpy float16), bfloat16 bits as uint16, contiguous.
  hid_t file = H5Fopen(path("model.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t half = H5Dopen2(file, "/head.weight", H5P_DEFAULT);
  hid_t type = H5Dget_type(half);
  EXPECT_EQ(H5Tget_class(type), H5T_FLOAT);
  EXPECT_EQ(H5Tget_size(type), 2u);
  H5Tclose(type);
  H5Dclose(half);
  hid_t bf16 = H5Dopen2(file, "/emb.weight", H5P_DEFAULT);
  type = H5Dget_type(bf16);
  EXPECT_EQ(H5Tget_class(type), H5T_INTEGER);
  EXPECT_EQ(H5Tget_size(type), 2u);
  hid_t plist = H5Dget_create_plist(bf16);
  EXPECT_EQ(H5Pget_layout(plist), H5D_CONTIGUOUS);
  H5Pclose(plist);
  H5Tclose(type);
  H5Dclose(bf16);
  H5Fclose(file);
}

TEST_F(CheckpointVerify, TruncatedFile) {
  fs::resize_file(path("model.h5"), testing::file_size(path("model.h5")) - 100);
  expect_fallback("model.h5: size");
}

TEST_F(CheckpointVerify, FlippedByte) {
  const auto size = static_cast<std::streamoff>(testing::file_size(path("optimizer.h5")));
  testing::overwrite(path("optimizer.h5"), size - 64, "\x7f");
  expect_fallback("optimizer.h5: checksum mismatch");
}

TEST_F(CheckpointVerify, MissingManifest) {
  fs::remove(path("manifest.json"));
  expect_fallback("missing manifest.json");
}

TEST_F(CheckpointVerify, DamagedManifest) {
  testing::overwrite(path("manifest.json"), 40, "#");
  expect_fallback("manifest.json");
}

TEST_F(CheckpointVerify, MissingFile) {
  fs::remove(path("rng.h5"));
  expect_fallback("rng.h5: missing");
}

TEST_F(CheckpointVerify, MissingTensor) {
  // A manifest (correctly sealed) listing a tensor the file does not hold.
  nlohmann::json m = read_manifest(second_);
  m["tensors"]["model/fc9.weight"] = m["tensors"]["model/fc1.weight"];
  m["tensors"]["model/fc9.weight"]["dataset"] = "/fc9.weight";
  fs::remove(path("manifest.json"));
  std::ofstream(path("manifest.json")) << seal_manifest(m);
  expect_fallback("model.h5: tensor 'model/fc9.weight' (dataset /fc9.weight) is missing");
}

TEST_F(CheckpointVerify, NotHdf5) {
  nlohmann::json m = read_manifest(second_);
  std::ofstream(path("model.h5"), std::ios::trunc) << "not hdf5";
  m["files"]["model.h5"] = {{"bytes", 8u}, {"xxh3", xxh3_hex("not hdf5")}};
  std::ofstream(path("manifest.json"), std::ios::trunc) << seal_manifest(m);
  expect_fallback("model.h5: not readable as HDF5");
}

TEST_F(CheckpointVerify, PartialTemporaryDirectoryIsNeverTaken) {
  // What a crash mid-save leaves: a newer step's .tmp directory without a manifest.
  const std::string tmp = run_dir_ + "/checkpoints/step_00000030.tmp-dead1";
  fs::create_directories(tmp);
  fs::copy_file(path("model.h5"), tmp + "/model.h5");
  EXPECT_EQ(list_checkpoints(run_dir_).front(), second_);
  EXPECT_EQ(choose_resume(run_dir_, "auto").path, second_);
  const ResumeChoice named = choose_resume(run_dir_, tmp);
  EXPECT_FALSE(named.path);
  EXPECT_NE(named.error.find("missing manifest.json"), std::string::npos) << named.error;
  // The next save removes it.
  save_local(run_dir_, sample_content(30));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_TRUE(verify(run_dir_ + "/checkpoints/step_00000030").ok);
}

TEST_F(CheckpointVerify, LatestNamingAMissingCheckpoint) {
  fs::remove_all(second_);
  const ResumeChoice choice = choose_resume(run_dir_, "auto");
  EXPECT_EQ(choice.path, first_);
  ASSERT_EQ(choice.skipped.size(), 1u);
  EXPECT_NE(choice.skipped[0].find("does not exist"), std::string::npos) << choice.skipped[0];
}

TEST_F(CheckpointVerify, NothingVerifies) {
  fs::remove(path("manifest.json"));
  fs::remove(first_ + "/manifest.json");
  const ResumeChoice choice = choose_resume(run_dir_, "auto");
  EXPECT_FALSE(choice.path);
  EXPECT_EQ(choice.skipped.size(), 2u);
  EXPECT_FALSE(choose_resume(run_dir_, "none").path);
  EXPECT_FALSE(choose_resume(testing::make_temp_dir(), "auto").path);
}

TEST_F(CheckpointVerify, ResumeByName) {
  EXPECT_EQ(choose_resume(run_dir_, "step_00000010").path, first_);
  EXPECT_NE(choose_resume(run_dir_, "step_00000099").error.find("does not exist"),
            std::string::npos);
}

TEST_F(CheckpointVerify, ResavingAStepReplacesIt) {
  const std::string again = save_local(run_dir_, sample_content(20, 0.5));
  EXPECT_EQ(again, second_);
  EXPECT_TRUE(verify(second_).ok) << verify(second_).reason;
  EXPECT_EQ(read_manifest(second_).at("metric"), 0.5);
  EXPECT_EQ(read_latest(run_dir_), second_);
  std::size_t entries = 0;
  for (const auto& e : fs::directory_iterator(run_dir_ + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, 3u);  // step_10, step_20, latest
}

TEST_F(CheckpointVerify, RejectsUnusableRecords) {
  SaveContent c = sample_content(30);
  c.tensors.push_back({"model/fc1.weight", torch::zeros({2}), {}});
  EXPECT_NE(error_of([&] { save_local(run_dir_, c); }).find("appears twice"), std::string::npos);
  c = sample_content(30);
  c.tensors.push_back({"model/fc1.weight/x", torch::zeros({2}), {}});
  EXPECT_NE(error_of([&] { save_local(run_dir_, c); }).find("both a dataset and a group"),
            std::string::npos);
  c = sample_content(30);
  c.tensors.push_back({"model/z", torch::zeros({2}, torch::kComplexFloat), {}});
  EXPECT_NE(error_of([&] { save_local(run_dir_, c); }).find("cannot be stored"), std::string::npos);
  c = sample_content(30);
  c.tensors.push_back({"model/w", torch::zeros({4, 3}), {{8, 3}, 0}});
  EXPECT_NE(error_of([&] { save_local(run_dir_, c); }).find("local shape"), std::string::npos);
  EXPECT_FALSE(fs::exists(run_dir_ + "/checkpoints/step_00000030"));
}

}  // namespace
}  // namespace hpctrain::checkpoint
