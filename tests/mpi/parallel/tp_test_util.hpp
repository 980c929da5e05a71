#pragma once
// Helpers shared by the tensor-parallel tests: tp groups of every size the world allows, seeded
// random tensors that are the same on every rank, and tolerance checks that say what differed.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::parallel::testing {

/// A process grid with tensor-parallel size tp and its tp communicator (destroyed first).
struct TpGroup {
  std::unique_ptr<runtime::ProcessGrid> grid;
  std::shared_ptr<comm::MpiCommunicator> tp;
};

/// The tp sizes among 1, 2, 4 that divide the world size. Local.
inline std::vector<int> tp_sizes() {
  const int world = runtime::Runtime::current()->world_size();
  std::vector<int> sizes;
  for (int tp : {1, 2, 4}) {
    if (world % tp == 0) sizes.push_back(tp);
  }
  return sizes;
}

/// Splits the world into tp groups of `tp` ranks. Collective over the world.
inline TpGroup make_group(int tp) {
  TpGroup g;
  g.grid = std::make_unique<runtime::ProcessGrid>(*runtime::Runtime::current(), tp);
  g.tp = std::make_shared<comm::MpiCommunicator>(g.grid->tp_comm(), "tp", /*async_thread=*/true);
  return g;
}

/// N(0, 1) values from a generator seeded with `seed`: the same on every rank. Local.
inline torch::Tensor seeded_randn(std::vector<std::int64_t> shape, std::uint64_t seed,
                                  torch::ScalarType dtype = torch::kDouble) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return torch::randn(shape, gen, torch::TensorOptions().dtype(dtype));
}

/// Uniform ids in [0, high) from a generator seeded with `seed`. Local.
inline torch::Tensor seeded_ids(std::vector<std::int64_t> shape, std::int64_t high,
                                std::uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return torch::randint(high, shape, gen, torch::TensorOptions().dtype(torch::kLong));
}

/// Max |got - want| <= tol (shapes equal). Local.
inline void expect_close(const torch::Tensor& got, const torch::Tensor& want, double tol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  if (got.numel() == 0) return;
  const double err = (got.detach().to(torch::kDouble) - want.detach().to(torch::kDouble))
                         .abs()
                         .max()
                         .item<double>();
  EXPECT_LE(err, tol) << what << ": max abs difference " << err;
}

}  // namespace hpctrain::parallel::testing
