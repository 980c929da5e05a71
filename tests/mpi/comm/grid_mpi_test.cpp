// Process grid and group communicators at every (dp, tp) shape the world size allows.

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include <cstdlib>
#include <limits>
#include <thread>

#include "hpctrain/comm/control_plane.hpp"
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

// dp x pp x tp at every shape the world allows: coordinates from the world rank (tp innermost,
// then pp, then dp), and each group's members identified by sums of their world ranks.
TEST(ProcessGrid, EveryPipelineShapeAndItsGroups) {
  const Runtime& rt = *Runtime::current();
  const int world = rt.world_size();
  const int me = rt.world_rank();
  DeviceBinding cpu;
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; pp * tp <= world; ++pp) {
      if (world % (tp * pp) != 0) continue;
      ProcessGrid grid(rt, tp, pp);
      const int dp = world / (tp * pp);
      SCOPED_TRACE(grid.describe());
      EXPECT_EQ(grid.world_size(), world);
      EXPECT_EQ(grid.pp_size(), pp);
      EXPECT_EQ(grid.tp_rank(), me % tp);
      EXPECT_EQ(grid.pp_rank(), (me / tp) % pp);
      EXPECT_EQ(grid.dp_rank(), me / (tp * pp));
      EXPECT_EQ(grid.world_rank_of(grid.dp_rank(), grid.pp_rank(), grid.tp_rank()), me);
      if (pp == 1) {
        EXPECT_EQ(grid.describe(), "dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp));
      } else {
        EXPECT_EQ(grid.describe(), "dp=" + std::to_string(dp) + " x pp=" + std::to_string(pp) +
                                       " x tp=" + std::to_string(tp));
      }
      auto comms = comm::make_group_communicators(rt, grid, cpu, "mpi");
      auto control = comm::make_control_groups(grid);
      ASSERT_TRUE(comms.pp && control.pp);
      EXPECT_EQ(comms.pp->size(), pp);
      EXPECT_EQ(comms.pp->rank(), grid.pp_rank());
      EXPECT_EQ(control.pp->rank(), grid.pp_rank());
      EXPECT_EQ(comms.tp->rank(), grid.tp_rank());
      EXPECT_EQ(comms.dp->rank(), grid.dp_rank());
      // Sum of the members' world ranks, computed from the coordinates.
      double pp_sum = 0, tp_sum = 0, dp_sum = 0, model_sum = 0;
      for (int p = 0; p < pp; ++p) pp_sum += grid.world_rank_of(grid.dp_rank(), p, grid.tp_rank());
      for (int t = 0; t < tp; ++t) tp_sum += grid.world_rank_of(grid.dp_rank(), grid.pp_rank(), t);
      for (int d = 0; d < dp; ++d) dp_sum += grid.world_rank_of(d, grid.pp_rank(), grid.tp_rank());
      for (int p = 0; p < pp; ++p)
        for (int t = 0; t < tp; ++t) model_sum += grid.world_rank_of(grid.dp_rank(), p, t);
      auto sum_over = [&](comm::Communicator& c) {
        auto x = torch::full({1}, static_cast<double>(me));
        c.all_reduce(x, comm::ReduceOp::kSum);
        return x.item<double>();
      };
      EXPECT_EQ(sum_over(*comms.pp), pp_sum);
      EXPECT_EQ(sum_over(*comms.tp), tp_sum);
      EXPECT_EQ(sum_over(*comms.dp), dp_sum);
      EXPECT_EQ(control.pp->sum(static_cast<double>(me)), pp_sum);
      comm::ControlPlane model(grid.model_comm(), "model");
      EXPECT_EQ(model.size(), pp * tp);
      EXPECT_EQ(model.rank(), grid.pp_rank() * tp + grid.tp_rank());
      EXPECT_EQ(model.sum(static_cast<double>(me)), model_sum);
    }
  }
}

TEST(ProcessGrid, PipelineShapeErrorsNameTheFix) {
  // Local checks, the same on every rank: world 6 with pp 4, world 4 with pp 3 x tp 2.
  try {
    validate_grid(6, 1, 4);
    FAIL() << "6 ranks do not split into pipelines of 4";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("world size 6 is not divisible by parallel.pp x "
                                         "parallel.tp = 4 x 1 = 4"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mpirun -np 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate_grid(4, 2, 3), ConfigError);
  EXPECT_THROW(validate_grid(4, 1, 0), ConfigError);
  const GridShape s = validate_grid(8, 2, 2);
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(s.pp, 2);
  EXPECT_EQ(s.tp, 2);
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

// One thread on the CPU: the binding the DeviceBinding tests apply.
DeviceRequest one_cpu_thread() {
  DeviceRequest request;
  request.threads = 1;
  request.device = "cpu";
  return request;
}

TEST(DeviceBinding, FlushesDenormalsHereAndInLaterThreadsUnlessDisabled) {
  const Runtime& rt = *Runtime::current();
  const DeviceRequest request = one_cpu_thread();
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

// oneDNN's CPU convolutions: on by default with LibTorch 1.13, off with 2.x (its convolution
// backward now and then writes non-finite weight gradients: compat/torch_version.hpp);
// HPCTRAIN_CPU_ONEDNN decides either way, and LibTorch's own switch follows.
TEST(DeviceBinding, CpuOneDnnFollowsTheLibTorchVersionUnlessTheEnvironmentDecides) {
  const Runtime& rt = *Runtime::current();
  const DeviceRequest request = one_cpu_thread();
  unsetenv("HPCTRAIN_CPU_ONEDNN");
  const bool expected = TORCH_VERSION_MAJOR < 2;
  EXPECT_EQ(bind_device(rt, request).cpu_onednn, expected);
  EXPECT_EQ(at::globalContext().userEnabledMkldnn(), expected);
  setenv("HPCTRAIN_CPU_ONEDNN", "1", 1);
  EXPECT_TRUE(bind_device(rt, request).cpu_onednn);
  EXPECT_TRUE(at::globalContext().userEnabledMkldnn());
  setenv("HPCTRAIN_CPU_ONEDNN", "0", 1);
  EXPECT_FALSE(bind_device(rt, request).cpu_onednn);
  EXPECT_FALSE(at::globalContext().userEnabledMkldnn());
  unsetenv("HPCTRAIN_CPU_ONEDNN");
  EXPECT_EQ(bind_device(rt, request).cpu_onednn, expected);
}

}  // namespace
}  // namespace hpctrain::runtime
