// Process grid and group communicators at every (dp, tp) shape the world size allows.

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>
#include <thread>

#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/runtime/device.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::runtime {
namespace {

TEST(ProcessGrid, EveryShapeAndItsGroups) {
  const Runtime& rt = *Runtime::current();
  const int world = rt.world_size();
  DeviceBinding cpu;
  for (int tp = 1; tp <= world; ++tp) {
    if (world % tp != 0) continue;
    ProcessGrid grid(rt, tp);
    const int dp = world / tp;
    EXPECT_EQ(grid.dp_size(), dp);
    EXPECT_EQ(grid.tp_size(), tp);
    // tp innermost.
    EXPECT_EQ(grid.tp_rank(), rt.world_rank() % tp);
    EXPECT_EQ(grid.dp_rank(), rt.world_rank() / tp);
    EXPECT_TRUE(grid.tp_groups_within_nodes());  // one machine

    auto comms = comm::make_group_communicators(rt, grid, cpu, "mpi");
    EXPECT_EQ(comms.tp->size(), tp);
    EXPECT_EQ(comms.dp->size(), dp);
    EXPECT_EQ(comms.tp->rank(), grid.tp_rank());
    EXPECT_EQ(comms.dp->rank(), grid.dp_rank());

    // Sum of world ranks over each group identifies the group's members.
    auto in_tp = torch::full({1}, static_cast<double>(rt.world_rank()));
    comms.tp->all_reduce(in_tp, comm::ReduceOp::kSum);
    EXPECT_EQ(in_tp.item<double>(), tp * grid.dp_rank() * tp + tp * (tp - 1) / 2.0) << "tp=" << tp;
    auto in_dp = torch::full({1}, static_cast<double>(rt.world_rank()));
    comms.dp->all_reduce(in_dp, comm::ReduceOp::kSum);
    EXPECT_EQ(in_dp.item<double>(), tp * dp * (dp - 1) / 2.0 + dp * grid.tp_rank()) << "tp=" << tp;
    auto all = torch::ones({1});
    comms.world->all_reduce(all, comm::ReduceOp::kSum);
    EXPECT_EQ(all.item<float>(), world);
  }
}

TEST(ProcessGrid, IndivisibleTpThrowsBeforeAnyCollective) {
  const Runtime& rt = *Runtime::current();
  // world + 1 never divides world (for world > 1), and 2 does not divide 1.
  const int tp = rt.world_size() == 1 ? 2 : rt.world_size() + 1;
  EXPECT_THROW(ProcessGrid(rt, tp), ConfigError);
  // Every rank threw without entering a collective: a barrier still matches up.
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(ProcessGrid, BackendChoice) {
  const Runtime& rt = *Runtime::current();
  ProcessGrid grid(rt, 1);
  DeviceBinding cpu;
  EXPECT_EQ(comm::make_group_communicators(rt, grid, cpu, "auto").backend, "mpi");
  EXPECT_THROW(comm::make_group_communicators(rt, grid, cpu, "nccl"), ConfigError);
  EXPECT_THROW(comm::make_group_communicators(rt, grid, cpu, "gloo"), ConfigError);
}

// Half the smallest normal float32: a denormal, computed at compile time (not under the FP mode).
constexpr float kHalfMin = std::numeric_limits<float>::min() / 2;

// The same product computed by LibTorch at run time: 0 when denormals are flushed.
float half_min_in_torch() {
  return (torch::full({8}, std::numeric_limits<float>::min()) * 0.5f)[3].item<float>();
}

TEST(DeviceBinding, FlushesDenormalsHereAndInLaterThreadsUnlessDisabled) {
  const Runtime& rt = *Runtime::current();
  DeviceRequest request;
  request.threads = 1;
  request.device = "cpu";
  unsetenv("HPCTRAIN_FLUSH_DENORMAL");
  EXPECT_TRUE(bind_device(rt, request).flush_denormal);
  EXPECT_EQ(half_min_in_torch(), 0.0f);
  float in_thread = -1;
  std::thread([&] { in_thread = half_min_in_torch(); }).join();  // e.g. the prefetcher, a writer
  EXPECT_EQ(in_thread, 0.0f);

  setenv("HPCTRAIN_FLUSH_DENORMAL", "0", 1);
  EXPECT_FALSE(bind_device(rt, request).flush_denormal);
  EXPECT_EQ(half_min_in_torch(), kHalfMin);
  unsetenv("HPCTRAIN_FLUSH_DENORMAL");
  EXPECT_TRUE(bind_device(rt, request).flush_denormal);
}

}  // namespace
}  // namespace hpctrain::runtime
