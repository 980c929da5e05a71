// The checkpoint manager on real ranks (registered at 1, 2 and 4): saved at one dp x tp layout
// and loaded at every other, the logical values are identical; only dp rank 0 writes; each rank
// gets its RNG state back at the same world size; background and synchronous saving; errors on
// one rank surface on all; retention keeps the newest K plus the best.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <stdlib.h>

#include <filesystem>
#include <mutex>

#include "../../support/mpi_test_util.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::checkpoint {
namespace {

namespace fs = std::filesystem;

using hpctrain::testing::world_rank;
using hpctrain::testing::world_size;

// A fresh run directory, the same on every rank.
std::string shared_dir(const char* name) {
  return hpctrain::testing::shared_temp_dir("ckpt_mpi") + "/" + name;
}

std::vector<int> tp_sizes() {
  std::vector<int> out;
  for (int tp = 1; tp <= world_size(); ++tp) {
    if (world_size() % tp == 0) out.push_back(tp);
  }
  return out;
}

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
  int split_dim;
  torch::ScalarType dtype;
};

// Uneven extents on purpose: at tp = 4, emb.weight (10 rows) pads 2 rows on the last rank and
// fc.weight (9 columns) leaves the last rank only padding.
const std::vector<Spec>& specs() {
  static const std::vector<Spec> s{
      {"model/emb.weight", {10, 6}, 0, torch::kFloat},
      {"model/fc.weight", {7, 9}, 1, torch::kFloat},
      {"model/fc.bias", {7}, -1, torch::kFloat},
      {"model/head.weight", {5, 4}, 0, torch::kBFloat16},
      {"optimizer/exp_avg/emb.weight", {10, 6}, 0, torch::kDouble},
      {"optimizer/exp_avg_sq/fc.weight", {7, 9}, 1, torch::kHalf},
      {"optimizer/step", {}, -1, torch::kLong},
  };
  return s;
}

torch::Tensor logical_value(const Spec& spec, double salt) {
  std::int64_t numel = 1;
  for (auto d : spec.shape) numel *= d;
  return (torch::arange(numel, torch::kDouble) * 0.25 + salt).view(spec.shape).to(spec.dtype);
}

// This rank's records at (tp_rank, tp_size) holding values that depend on `salt`.
std::vector<TensorRecord> records(const runtime::ProcessGrid& grid, double salt) {
  std::vector<TensorRecord> out;
  for (const Spec& s : specs()) {
    torch::Tensor local = parallel::shard_of(logical_value(s, salt), {s.shape, s.split_dim},
                                             grid.tp_rank(), grid.tp_size());
    out.push_back({s.name, local, {s.shape, s.split_dim}});
  }
  return out;
}

// Targets of the right local shapes, filled with garbage that a load must overwrite entirely.
std::vector<TensorRecord> targets(const runtime::ProcessGrid& grid) {
  std::vector<TensorRecord> out = records(grid, 0);
  for (auto& r : out) r.local.fill_(-7);
  return out;
}

void expect_values(const std::vector<TensorRecord>& loaded, const runtime::ProcessGrid& grid,
                   double salt, const std::string& what) {
  const auto expected = records(grid, salt);
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_TRUE(torch::equal(loaded[i].local, expected[i].local))
        << what << ": " << loaded[i].name << " on world rank " << grid.world_rank() << "\nloaded\n"
        << loaded[i].local << "\nexpected\n"
        << expected[i].local;
  }
}

SaveContent content_at(const runtime::ProcessGrid& grid, std::int64_t step, double salt) {
  SaveContent c;
  c.step = step;
  c.epoch = 1;
  c.consumed_samples = step * 32;
  c.trainer_state = {{"step", step}};
  c.config_text = "test: true\n";
  // Only dp rank 0 writes: the others pass different values, which must never reach the file.
  c.tensors = records(grid, grid.dp_rank() == 0 ? salt : salt + 1000);
  return c;
}

ManagerOptions options(bool background = true) {
  ManagerOptions o;
  o.background = background;
  o.keep = 100;
  return o;
}

runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

TEST(CheckpointMpi, ReshardsBetweenEveryTpLayout) {
  const std::string run_dir = shared_dir("reshard");
  for (int tp_save : tp_sizes()) {
    runtime::ProcessGrid grid(rt(), tp_save);
    const std::string dir = run_dir + "/tp" + std::to_string(tp_save);
    CheckpointManager saver(dir, grid, options());
    saver.save(content_at(grid, 100 + tp_save, tp_save));
    saver.wait();
    for (int tp_load : tp_sizes()) {
      runtime::ProcessGrid load_grid(rt(), tp_load);
      CheckpointManager loader(dir, load_grid, options());
      const auto path = loader.resolve("auto");
      ASSERT_TRUE(path);
      auto t = targets(load_grid);
      const Loaded loaded = loader.load(*path, t);
      EXPECT_EQ(loaded.step, 100 + tp_save);
      EXPECT_EQ(loaded.consumed_samples, (100 + tp_save) * 32);
      EXPECT_EQ(loaded.trainer_state.at("step"), 100 + tp_save);
      EXPECT_TRUE(loaded.same_world);
      EXPECT_EQ(loaded.same_grid, tp_load == tp_save);
      EXPECT_EQ(loaded.manifest.at("grid").at("tp"), tp_save);
      expect_values(
          t, load_grid, tp_save,
          "saved at tp " + std::to_string(tp_save) + ", loaded at tp " + std::to_string(tp_load));
    }
  }
}

TEST(CheckpointMpi, RngStatesRoundTripAtTheSameWorldSize) {
  const std::string run_dir = shared_dir("rng");
  runtime::ProcessGrid grid(rt(), 1);
  torch::manual_seed(1000 + world_rank());
  const torch::Tensor mine = [] {
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    return generator.get_state();
  }();
  {
    CheckpointManager m(run_dir, grid, options());
    SaveContent c = content_at(grid, 5, 0.5);
    c.rng_state = mine;
    m.save(std::move(c));
    m.wait();
    auto t = targets(grid);
    const Loaded loaded = m.load(*m.resolve("auto"), t);
    EXPECT_TRUE(loaded.same_world);
    ASSERT_TRUE(loaded.rng_state.defined());
    EXPECT_TRUE(torch::equal(loaded.rng_state, mine));
    EXPECT_EQ(loaded.manifest.at("rng").at("ranks"), world_size());
  }
  // Each rank alone (a world of 1) loads the same checkpoint: values are whole, and the RNG
  // state is undefined unless the world really had one rank.
  runtime::ProcessGrid self(rt(), 1, MPI_COMM_SELF);
  CheckpointManager alone(run_dir, self, options());
  auto t = targets(self);
  const Loaded loaded = alone.load(*alone.resolve("auto"), t);
  expect_values(t, self, 0.5, "loaded by a world of one");
  EXPECT_EQ(loaded.same_world, world_size() == 1);
  EXPECT_EQ(loaded.rng_state.defined(), world_size() == 1);
}

TEST(CheckpointMpi, BackgroundAndSynchronousSaving) {
  const std::string run_dir = shared_dir("modes");
  runtime::ProcessGrid grid(rt(), world_size());  // every rank a writer
  {
    CheckpointManager m(run_dir, grid, options(true));
    m.save(content_at(grid, 1, 1.0));
    EXPECT_GE(m.last_blocking_seconds(), 0.0);
    m.wait();
    EXPECT_GE(m.last_save_seconds(), m.last_blocking_seconds());
    EXPECT_GT(m.last_save_bytes(), 0);
    EXPECT_EQ(fs::path(m.last_saved_path()).filename(), "step_00000001");
  }
  CheckpointManager m(run_dir, grid, options(false));
  m.save(content_at(grid, 2, 2.0));
  // Synchronous: committed when save() returns.
  if (world_rank() == 0) {
    EXPECT_TRUE(verify(run_dir + "/checkpoints/step_00000002").ok);
    EXPECT_EQ(read_latest(run_dir), run_dir + "/checkpoints/step_00000002");
  }
  auto t = targets(grid);
  m.load(*m.resolve("auto"), t);
  expect_values(t, grid, 2.0, "synchronous save");
}

TEST(CheckpointMpi, BackgroundErrorsSurfaceOnEveryRankAndLeaveNothing) {
  const std::string run_dir = shared_dir("errors");
  runtime::ProcessGrid grid(rt(), world_size());
  CheckpointManager m(run_dir, grid, options(true));
  m.save(content_at(grid, 1, 1.0));
  m.wait();
  const std::string last_writer = std::to_string(world_size() - 1);
  for (const std::string& failure : {"write@" + last_writer, std::string("commit@0")}) {
    setenv("HPCTRAIN_TEST_CHECKPOINT_FAIL", failure.c_str(), 1);
    m.save(content_at(grid, 2, 2.0));  // returns: the failure happens in the background
    std::string message;
    try {
      m.wait();
    } catch (const CheckpointError& e) {
      message = e.what();
    }
    unsetenv("HPCTRAIN_TEST_CHECKPOINT_FAIL");
    EXPECT_NE(message.find("injected failure"), std::string::npos) << failure << ": " << message;
    EXPECT_NE(message.find("previous checkpoint is intact"), std::string::npos) << message;
    if (world_rank() == 0) {
      EXPECT_EQ(list_checkpoints(run_dir).size(), 1u);
      EXPECT_EQ(read_latest(run_dir), run_dir + "/checkpoints/step_00000001");
      for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) {
        EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  m.save(content_at(grid, 3, 3.0));
  m.wait();
  auto t = targets(grid);
  const Loaded loaded = m.load(*m.resolve("auto"), t);
  EXPECT_EQ(loaded.step, 3);
  expect_values(t, grid, 3.0, "after failed saves");
}

TEST(CheckpointMpi, CopiedContentIsIndependentOfLiveTensors) {
  const std::string run_dir = shared_dir("copy");
  runtime::ProcessGrid grid(rt(), world_size());
  CheckpointManager m(run_dir, grid, options(true));
  for (std::int64_t step = 1; step <= 2; ++step) {  // the second save reuses the buffers
    SaveContent c = content_at(grid, step, static_cast<double>(step));
    std::vector<TensorRecord> live = c.tensors;
    c.copy = true;
    m.save(std::move(c));
    for (auto& r : live) r.local.add_(100);  // training goes on while the save is written
    m.wait();
  }
  auto t = targets(grid);
  m.load(*m.resolve("auto"), t);
  expect_values(t, grid, 2.0, "copy = true");
}

TEST(CheckpointMpi, DeferredCopyIsTakenBeforeWaitForCopyReturns) {
  const std::string run_dir = shared_dir("deferred");
  runtime::ProcessGrid grid(rt(), world_size());
  for (bool background : {true, false}) {  // synchronous saving copies inside save()
    CheckpointManager m(run_dir, grid, options(background));
    for (std::int64_t step = 1; step <= 2; ++step) {
      const double salt = static_cast<double>(step) + (background ? 0 : 10);
      SaveContent c = content_at(grid, step + (background ? 0 : 10), salt);
      std::vector<TensorRecord> live = c.tensors;
      c.copy = true;
      c.defer_copy = true;
      m.save(std::move(c));
      EXPECT_GE(m.wait_for_copy(), 0.0);
      EXPECT_GE(m.last_copy_wait_seconds(), 0.0);
      if (grid.dp_rank() == 0) {
        EXPECT_GT(m.last_copy_seconds(), 0.0) << "the copy was timed";
      }
      // The optimizer step: only after wait_for_copy() may the live tensors change.
      for (auto& r : live) r.local.add_(100);
      m.wait();
      const double again = m.wait_for_copy();  // nothing pending: returns at once
      EXPECT_EQ(again, m.last_copy_wait_seconds());
    }
    auto t = targets(grid);
    m.load(*m.resolve("auto"), t);
    expect_values(t, grid, background ? 2.0 : 12.0, background ? "deferred copy" : "sync copy");
  }
}

TEST(CheckpointMpi, ModelMismatchNamesEveryTensorOnEveryRank) {
  const std::string run_dir = shared_dir("mismatch");
  runtime::ProcessGrid grid(rt(), 1);
  CheckpointManager m(run_dir, grid, options(false));
  m.save(content_at(grid, 1, 1.0));
  auto t = targets(grid);
  t[1].local = torch::zeros({7, 10});
  t[1].shard.logical_shape = {7, 10};
  t.push_back({"model/extra.weight", torch::zeros({3}), {{3}, -1}});
  std::string message;
  try {
    m.load(*m.resolve("auto"), t);
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("2 tensor(s) missing or mismatching"), std::string::npos) << message;
  EXPECT_NE(message.find("model/fc.weight: saved logical shape (7, 9), expected (7, 10)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("model/extra.weight: not in the checkpoint"), std::string::npos)
      << message;
  // Records the target list leaves out (the optimizer state, for evaluation) are ignored.
  auto model_only = targets(grid);
  model_only.resize(4);
  m.load(*m.resolve("auto"), model_only);
  expect_values(model_only, grid, 1.0, "model only");
}

TEST(CheckpointMpi, RanksThatDisagreeAreRefusedOnEveryRank) {
  const std::string run_dir = shared_dir("disagree");
  runtime::ProcessGrid grid(rt(), world_size());
  CheckpointManager m(run_dir, grid, options(true));
  SaveContent c = content_at(grid, world_rank() == world_size() - 1 ? 8 : 7, 1.0);
  std::string message;
  try {
    m.save(std::move(c));
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  if (world_size() > 1) {
    EXPECT_NE(message.find("disagree on the step"), std::string::npos) << message;
  }
  c = content_at(grid, 9, 1.0);
  c.tensors[0].name = "model/bad name/";
  message.clear();
  try {
    m.save(std::move(c));
  } catch (const CheckpointError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("model/bad name/"), std::string::npos) << message;
  EXPECT_TRUE(list_checkpoints(run_dir).size() <= 1u);
}

TEST(CheckpointMpi, RetentionKeepsNewestBestAndLoaded) {
  const std::string run_dir = shared_dir("retention");
  runtime::ProcessGrid grid(rt(), world_size());
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& p : list_checkpoints(run_dir)) out.push_back(fs::path(p).filename().string());
    return out;
  };
  ManagerOptions o = options(true);
  o.keep = 2;
  o.higher_is_better = true;
  {
    CheckpointManager m(run_dir, grid, o);
    const std::vector<double> metrics{0.5, 0.9, 0.3, 0.4};
    for (std::size_t i = 0; i < metrics.size(); ++i) {
      SaveContent c = content_at(grid, static_cast<std::int64_t>(i + 1), 1.0);
      c.metric = metrics[i];
      m.save(std::move(c));
    }
    m.wait();
  }
  if (world_rank() == 0) {
    EXPECT_EQ(names(),
              (std::vector<std::string>{"step_00000004", "step_00000003", "step_00000002"}));
  }
  // Resumed from step 3 without keep_best: step 3 stays while it is the one loaded.
  o.keep_best = false;
  CheckpointManager m(run_dir, grid, o);
  auto t = targets(grid);
  m.load(run_dir + "/checkpoints/step_00000003", t);
  for (std::int64_t step = 5; step <= 7; ++step) m.save(content_at(grid, step, 1.0));
  m.wait();
  if (world_rank() == 0) {
    EXPECT_EQ(names(),
              (std::vector<std::string>{"step_00000007", "step_00000006", "step_00000003"}));
  }
}

}  // namespace
}  // namespace hpctrain::checkpoint
