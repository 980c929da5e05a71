// runtime::require_regular_file (issue 32): stat(2) only, so a FIFO is recognised without the
// open that would block; each kind of file gets its own error type (exit code).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"

namespace hpctrain::runtime {
namespace {

class RegularFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/hpctrain-regular-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
    std::ofstream(dir_ + "/file") << "x";
    ASSERT_EQ(::mkfifo((dir_ + "/fifo").c_str(), 0644), 0);
  }
  void TearDown() override {
    ::unlink((dir_ + "/file").c_str());
    ::unlink((dir_ + "/fifo").c_str());
    ::rmdir(dir_.c_str());
  }
  std::string dir_;
};

TEST_F(RegularFile, TypesWithoutOpening) {
  EXPECT_EQ(path_type(dir_ + "/file"), PathType::kRegular);
  EXPECT_EQ(path_type(dir_ + "/fifo"), PathType::kFifo);  // would block if it were opened
  EXPECT_EQ(path_type(dir_), PathType::kDirectory);
  EXPECT_EQ(path_type(dir_ + "/none"), PathType::kMissing);
  EXPECT_EQ(path_type("/dev/null"), PathType::kCharDevice);
  EXPECT_STREQ(path_type_name(PathType::kFifo), "a FIFO");
}

TEST_F(RegularFile, ErrorTypeByKind) {
  const std::string fifo = dir_ + "/fifo";
  EXPECT_NO_THROW(require_regular_file(dir_ + "/file", FileKind::kCheckpoint, "x", ""));
  EXPECT_THROW(require_regular_file(fifo, FileKind::kCheckpoint, "x", ""), CheckpointError);
  EXPECT_THROW(require_regular_file(fifo, FileKind::kData, "x", ""), DataError);
  EXPECT_THROW(require_regular_file(fifo, FileKind::kConfig, "x", ""), ConfigError);
  try {
    require_regular_file(fifo, FileKind::kCheckpoint, "checkpoint file", "resume from another");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()),
              "checkpoint file '" + fifo + "' is not a regular file (a FIFO): resume from another");
    EXPECT_EQ(e.exit_code(), kExitCheckpoint);
  }
  EXPECT_THROW(require_regular_file(dir_ + "/none", FileKind::kData, "data file", ""), DataError);
  EXPECT_FALSE(require_regular_file_if_present(dir_ + "/none", FileKind::kData, "x", ""));
  EXPECT_TRUE(require_regular_file_if_present(dir_ + "/file", FileKind::kData, "x", ""));
  EXPECT_THROW(require_regular_file_if_present(dir_, FileKind::kConfig, "x", ""), ConfigError);
}

}  // namespace
}  // namespace hpctrain::runtime
