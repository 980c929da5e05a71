#pragma once
// Helpers shared by the GoogleTest suites of every layer: scratch directories and error capture.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace hpctrain::testing {

/// A fresh directory under the test temp dir, named hpctrain_<prefix>_XXXXXX. Local.
inline std::string make_temp_dir(const std::string& prefix) {
  std::string pattern = ::testing::TempDir() + "hpctrain_" + prefix + "_XXXXXX";
  char* dir = mkdtemp(pattern.data());
  if (!dir) throw std::runtime_error("mkdtemp failed for " + pattern);
  return dir;
}

/// The message of the E that `fn` throws, or "" when it throws none (another exception type
/// propagates). Local.
template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace hpctrain::testing
