#pragma once
// Helpers shared by the GoogleTest suites that run on real MPI ranks (tests/mpi).

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace hpctrain::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

/// A fresh directory under the test temp dir, created by world rank 0 and the same path on every
/// rank (hpctrain_<prefix>_XXXXXX). Collective over MPI_COMM_WORLD.
inline std::string shared_temp_dir(const std::string& prefix) {
  char dir[512] = {0};
  if (world_rank() == 0) {
    const std::string pattern = ::testing::TempDir() + "hpctrain_" + prefix + "_XXXXXX";
    std::snprintf(dir, sizeof dir, "%s", pattern.c_str());
    if (!mkdtemp(dir)) std::abort();
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

}  // namespace hpctrain::testing
