// The checkpointer's after-step call on real ranks (registered at 1 and 2), with the agreement the
// training loop runs: a background save every rank has finished is collected and recorded once;
// a background save that fails ends the run at the step its writing ended, on every rank; an
// agreed time interval saves; a synchronous save is recorded when it is handed over.

#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../../support/mpi_test_util.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/checkpoint/checkpointer.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::checkpoint {
namespace {

namespace fs = std::filesystem;

using hpctrain::testing::world_rank;
using hpctrain::testing::world_size;

std::string shared_dir(const char* name) {
  return hpctrain::testing::shared_temp_dir("checkpointer_mpi") + "/" + name;
}

runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

// The content of a save of `step`: one small tensor whose values depend on the step.
Checkpointer::Content content() {
  return [](std::int64_t step) {
    SaveContent c;
    c.step = step;
    c.trainer_state = {{"step", step}};
    c.config_text = "test: true\n";
    c.tensors.push_back({"model/w", torch::full({64}, static_cast<double>(step)), {}});
    return c;
  };
}

std::unique_ptr<CheckpointManager> manager(const std::string& run_dir,
                                           const runtime::ProcessGrid& grid, bool background) {
  ManagerOptions o;
  o.background = background;
  o.keep = 100;
  return std::make_unique<CheckpointManager>(run_dir, grid, o);
}

CheckpointConfig config(std::int64_t every_steps, double every_minutes = 0) {
  CheckpointConfig c;
  c.every_steps = every_steps;
  c.every_minutes = every_minutes;
  return c;
}

// What the loop agrees after a step: this rank's contribution, combined over the world.
comm::StopRequest agree(const Checkpointer& c, comm::ControlPlane& world) {
  comm::StopRequest local;
  c.contribute(local);
  comm::StopAgreement agreement(world);
  return agreement.agree(local);
}

// Agreements at successive steps until every rank's writer has finished the save in flight (a
// training loop keeps stepping meanwhile). Returns the agreed request that says so.
comm::StopRequest agree_until_written(const Checkpointer& c, comm::ControlPlane& world) {
  for (int i = 0; i < 3000; ++i) {
    const comm::StopRequest r = agree(c, world);
    if (!r.save_writing) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ADD_FAILURE() << "the background save did not finish";
  return {};
}

TEST(CheckpointerMpi, AFinishedBackgroundSaveIsCollectedAndRecordedOnce) {
  const std::string run_dir = shared_dir("collect");
  runtime::ProcessGrid grid(rt(), 1);
  comm::ControlPlane world(MPI_COMM_WORLD, "world");
  Checkpointer c(manager(run_dir, grid, true), config(2), -1, 1.0, content());
  std::vector<CommittedSave> recorded;
  c.set_record([&](const CommittedSave& s) { recorded.push_back(s); });
  // Step 1: nothing due.
  EXPECT_EQ(c.after_step(1, agree(c, world), false, false), 0.0);
  // Step 2: the interval saves in the background.
  EXPECT_GE(c.after_step(2, agree(c, world), false, false), 0.0);
  EXPECT_TRUE(c.manager().has_pending());
  EXPECT_TRUE(recorded.empty());  // not committed as far as anyone knows
  const comm::StopRequest finished = agree_until_written(c, world);
  ASSERT_TRUE(finished.save_finished());
  c.after_step(3, finished, false, false);
  EXPECT_FALSE(c.manager().has_pending());  // collected without a save of its own
  ASSERT_EQ(recorded.size(), 1u);
  EXPECT_EQ(recorded[0].step, 2);
  EXPECT_EQ(fs::path(recorded[0].path).filename(), "step_00000002");
  EXPECT_GT(recorded[0].bytes, 0);
  // Collected once: finishing records nothing more.
  c.finish();
  EXPECT_EQ(recorded.size(), 1u);
  if (world_rank() == 0) {
    EXPECT_EQ(read_latest(run_dir), recorded[0].path);
  }
}

TEST(CheckpointerMpi, AFailedBackgroundSaveEndsTheRunOnEveryRankWhenItsWritingEnds) {
  const std::string run_dir = shared_dir("failing");
  runtime::ProcessGrid grid(rt(), world_size());  // every rank a writer: the last one fails
  comm::ControlPlane world(MPI_COMM_WORLD, "world");
  Checkpointer c(manager(run_dir, grid, true), config(0), -1, 1.0, content());
  int records = 0;
  c.set_record([&](const CommittedSave&) { ++records; });
  const std::string failure = "write@" + std::to_string(world_size() - 1);
  setenv("HPCTRAIN_TEST_CHECKPOINT_FAIL", failure.c_str(), 1);
  c.after_step(4, agree(c, world), /*last_step=*/true, /*stop_save=*/true);  // a signal's save
  const comm::StopRequest finished = agree_until_written(c, world);
  unsetenv("HPCTRAIN_TEST_CHECKPOINT_FAIL");
  ASSERT_TRUE(finished.save_finished());
  std::string message;
  try {
    c.after_step(5, finished, false, false);
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("injected failure"), std::string::npos) << message;
  EXPECT_EQ(records, 0);
  if (world_rank() == 0) {
    EXPECT_TRUE(list_checkpoints(run_dir).empty());
  }
}

TEST(CheckpointerMpi, AnAgreedTimeIntervalSaves) {
  const std::string run_dir = shared_dir("time");
  runtime::ProcessGrid grid(rt(), 1);
  comm::ControlPlane world(MPI_COMM_WORLD, "world");
  Checkpointer c(manager(run_dir, grid, true), config(0, /*every_minutes=*/0.001), -1, 1.0,
                 content());
  std::vector<std::int64_t> steps;
  c.set_record([&](const CommittedSave& s) { steps.push_back(s.step); });
  std::this_thread::sleep_for(std::chrono::milliseconds(80));  // past 60 ms on every rank
  const comm::StopRequest due = agree(c, world);
  ASSERT_TRUE(due.save_due);
  c.after_step(3, due, false, false);
  c.finish();
  EXPECT_EQ(steps, std::vector<std::int64_t>{3});
}

TEST(CheckpointerMpi, ASynchronousSaveIsRecordedWhenHandedOver) {
  const std::string run_dir = shared_dir("sync");
  runtime::ProcessGrid grid(rt(), 1);
  comm::ControlPlane world(MPI_COMM_WORLD, "world");
  Checkpointer c(manager(run_dir, grid, false), config(0), -1, 1.0, content());
  std::vector<std::int64_t> steps;
  c.set_record([&](const CommittedSave& s) { steps.push_back(s.step); });
  c.after_step(9, agree(c, world), /*last_step=*/true, false);  // the end of the run
  EXPECT_EQ(steps, std::vector<std::int64_t>{9});
  c.after_step(9, agree(c, world), true, false);  // never the same step twice
  c.finish();
  EXPECT_EQ(steps, std::vector<std::int64_t>{9});
}

}  // namespace
}  // namespace hpctrain::checkpoint
