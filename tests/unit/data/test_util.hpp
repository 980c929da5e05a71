#pragma once
// Helpers shared by the data unit tests: scratch directories, error capture, h5py-written files.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "../../support/test_util.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::data::testing {

/// A fresh directory under the test temp dir. Local.
inline std::string make_temp_dir() {
  return hpctrain::testing::make_temp_dir("data");
}

/// The message of the hpctrain::Error that `fn` throws, or "" when it throws none. The error's
/// dynamic type must be E.
template <typename E = DataError>
std::string error_of(const std::function<void()>& fn) {
  return hpctrain::testing::error_of<E>(fn);
}

/// A directory holding the files tests/e2e/data/make_test_files.py writes (once per process).
inline const std::string& h5py_files() {
  static const std::string dir = [] {
    std::string d = make_temp_dir();
    std::string command = std::string("/usr/bin/python3 ") + HPCTRAIN_SOURCE_DIR +
                          "/tests/e2e/data/make_test_files.py " + d + " > /dev/null";
    if (std::system(command.c_str()) != 0) {
      throw std::runtime_error("cannot write h5py test files: " + command +
                               " failed (python3-h5py installed? scripts/setup.sh installs it)");
    }
    return d;
  }();
  return dir;
}

}  // namespace hpctrain::data::testing

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)
