// Sharded optimizer state (parallel.shard_optimizer) against the unsharded optimizer on the same
// grid: the same loss at every step and the same final parameters, bitwise where the reduction
// order is the same (dp <= 2: a reduce-scatter and an all-reduce add the same two numbers), else
// within 1e-6; with several optimizers, bucket sizes, accumulation, clipping and overlap off, and
// with parameters smaller than a shard (padding). Checkpoints of sharded runs hold logical
// tensors: a run stopped while sharded resumes exactly, sharded or not, and at another dp size.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {
namespace {

namespace fs = std::filesystem;

const runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

std::string dataset_dir() {
  static std::string dir = [] {
    int token = 0;
    if (rt().world_rank() == 0) token = static_cast<int>(getpid());
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string d = str("/tmp/hpctrain-shard-test-", token);
    if (rt().world_rank() == 0) {
      fs::create_directories(d);
      auto gen = at::detail::createCPUGenerator(5);
      auto labels = torch::randint(0, 4, {480}, gen, torch::kLong);
      auto centres = torch::randn({4, 12}, gen);
      auto inputs = centres.index_select(0, labels) + 0.7 * torch::randn({480, 12}, gen);
      data::Provenance prov{"synthetic", "shard_optimizer_test"};
      data::write_classification_file(d + "/train.h5", inputs, labels, 4, 1.0, prov);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

struct TrainResult {
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::vector<double> losses;  // per step, from metrics.jsonl
  TrainOutcome outcome;
};

std::vector<double> step_losses(const std::string& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("type", "") == "train") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

Config make_config(const std::string& run_dir, const std::string& extra) {
  Config c =
      Config::parse(str("run: {seed: 3, epochs: 1, max_steps: 8}\n"
                        "model: {name: mlp, in_features: 12, hidden: [24, 1], num_classes: 4}\n"
                        "data: {shuffle: true, prefetch: 2, batch_size: 4}\n"
                        "optim: {name: adam, lr: 0.01}\n"
                        "eval: {at_end: false}\n"
                        "checkpoint: {at_end: false}\n"
                        "logging: {every_steps: 1, progress: off}\n"),
                    "<test>");
  c.set("data.train=" + dataset_dir() + "/train.h5");
  c.set("run.dir=" + run_dir);
  std::istringstream items(extra);
  for (std::string item; items >> item;) c.set(item);
  return c;
}

TrainResult train_on(MPI_Comm base, Config config, const std::string& resume = "none") {
  runtime::ProcessGrid grid(rt(), 1, base);
  runtime::DeviceBinding cpu;
  auto comms = comm::make_group_communicators(rt(), grid, cpu, "mpi");
  Trainer trainer(config, "unused", comm::Environment{rt(), grid, cpu, comms}, resume);
  TrainResult run;
  run.outcome = trainer.run();
  run.params = trainer.local_parameters();
  run.losses = step_losses(trainer.config().run.dir);
  return run;
}

// Bitwise at dp <= 2, else within `tol` (a different reduction order).
void expect_same(const TrainResult& a, const TrainResult& b, double tol, const std::string& what) {
  const bool bitwise = rt().world_size() <= 2;
  ASSERT_EQ(a.params.size(), b.params.size()) << what;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    const auto& [name, x] = a.params[i];
    const auto& y = b.params[i].second;
    if (bitwise && tol == 0) {
      EXPECT_TRUE(torch::equal(x, y))
          << what << ": " << name << " differs by " << (x - y).abs().max().item<double>();
    } else {
      EXPECT_LE((x - y).abs().max().item<double>(), std::max(tol, 1e-6)) << what << ": " << name;
    }
  }
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  ASSERT_FALSE(a.losses.empty());
  for (std::size_t s = 0; s < a.losses.size(); ++s) {
    if (bitwise && tol == 0) {
      EXPECT_EQ(a.losses[s], b.losses[s]) << what << ": loss at step " << s + 1;
    } else {
      EXPECT_NEAR(a.losses[s], b.losses[s], std::max(tol, 1e-6)) << what << ": step " << s + 1;
    }
  }
}

std::string run_dir(const std::string& name) {
  return str(dataset_dir(), "/", name);
}

// Removes the data and run directories once every rank is done with them.
class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rt().world_rank() == 0) fs::remove_all(dataset_dir());
  }
};
[[maybe_unused]] const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

struct Case {
  const char* name;
  const char* settings;
  double tol;  // 0: bitwise at dp <= 2
};

class ShardedOptimizer : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedOptimizer, MatchesUnshardedStepByStep) {
  const Case c = GetParam();
  TrainResult plain =
      train_on(MPI_COMM_WORLD, make_config(run_dir(str(c.name, "-plain")), c.settings));
  TrainResult sharded =
      train_on(MPI_COMM_WORLD, make_config(run_dir(str(c.name, "-sharded")),
                                           str(c.settings, " parallel.shard_optimizer=true")));
  EXPECT_EQ(plain.losses.size(), 8u);
  expect_same(sharded, plain, c.tol, c.name);
  // Every dp rank ends with the same parameters (the all-gather), bitwise.
  for (auto& [name, tensor] : sharded.params) {
    auto copy = tensor.clone();
    MPI_Bcast(copy.data_ptr(), static_cast<int>(copy.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_TRUE(torch::equal(copy, tensor)) << name << " differs from rank 0's replica";
  }
}

// hidden [24, 1]: a bias of one element, fewer than the dp size, so buckets are padded.
INSTANTIATE_TEST_SUITE_P(
    Train, ShardedOptimizer,
    ::testing::Values(
        Case{"adam_one_bucket", "", 0},
        Case{"adamw_bucket_per_param", "optim.name=adamw parallel.bucket_mb=0", 0},
        Case{"sgd_momentum_small_buckets_no_overlap",
             "optim.name=sgd optim.momentum=0.9 parallel.bucket_mb=0.001 parallel.overlap=false",
             0},
        Case{"adam_accumulate3", "optim.grad_accumulation=3 parallel.bucket_mb=0", 0},
        // Clipping reads the global norm, whose partial sums are added in another order.
        Case{"adam_clipped", "optim.grad_clip=0.05 parallel.bucket_mb=0", 1e-6}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ShardedCheckpoint, StopWhileShardedResumesExactlySharedOrNot) {
  const std::string settings = "parallel.bucket_mb=0 checkpoint.keep=2";
  TrainResult full = train_on(MPI_COMM_WORLD, make_config(run_dir("ckpt-full"), settings));
  for (bool resume_sharded : {true, false}) {
    const std::string dir = run_dir(str("ckpt-part-", resume_sharded));
    TrainResult stopped =
        train_on(MPI_COMM_WORLD, make_config(dir, settings + " parallel.shard_optimizer=true "
                                                             "debug.stop_step=3"));
    EXPECT_EQ(stopped.outcome.steps, 3);
    EXPECT_NE(stopped.outcome.exit_code, 0);
    TrainResult resumed = train_on(
        MPI_COMM_WORLD,
        make_config(
            dir, settings + str(" parallel.shard_optimizer=", resume_sharded ? "true" : "false")),
        "auto");
    EXPECT_EQ(resumed.outcome.steps, 8);
    // The first three losses were logged by the stopped run (metrics.jsonl continues).
    expect_same(resumed, full, 0, str("resumed ", resume_sharded ? "sharded" : "unsharded"));
  }
}

TEST(ShardedCheckpoint, ResumesAtAnotherDataParallelSize) {
  // Stopped at step 3 on the whole world, sharded; resumed on one rank (dp = 1, the same global
  // batch), unsharded and sharded; and the other way round. The global batch and sample stream
  // are the same, so only the reduction order of the gradient average differs (1e-5, as in
  // train_equivalence_test).
  const int world = rt().world_size();
  const std::string settings = "parallel.bucket_mb=0";
  const std::string dir = run_dir("dp-part");
  train_on(MPI_COMM_WORLD,
           make_config(dir, settings + " parallel.shard_optimizer=true debug.stop_step=3"));
  TrainResult reference = train_on(MPI_COMM_WORLD, make_config(run_dir("dp-full"), settings));
  const std::string single = str(" data.batch_size=", 4 * world);
  for (bool sharded : {false, true}) {
    // Each rank resumes its own copy of the checkpointed run directory on MPI_COMM_SELF.
    const std::string mine = run_dir(str("dp-one-", sharded, "-", rt().world_rank()));
    fs::remove_all(mine);
    fs::copy(dir, mine, fs::copy_options::recursive);
    TrainResult resumed = train_on(
        MPI_COMM_SELF,
        make_config(mine, settings + single +
                              str(" parallel.shard_optimizer=", sharded ? "true" : "false")),
        "auto");
    EXPECT_EQ(resumed.outcome.steps, 8);
    for (std::size_t i = 0; i < reference.params.size(); ++i) {
      EXPECT_LE((resumed.params[i].second - reference.params[i].second).abs().max().item<double>(),
                1e-5)
          << reference.params[i].first << " (resumed on one rank, sharded " << sharded << ")";
    }
  }
  // One rank to the world: rank 0 trains 3 steps alone, the world resumes sharded.
  const std::string up = run_dir("dp-up");
  if (rt().world_rank() == 0) {
    train_on(MPI_COMM_SELF, make_config(up, settings + single + " debug.stop_step=3"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  TrainResult grown = train_on(
      MPI_COMM_WORLD, make_config(up, settings + " parallel.shard_optimizer=true"), "auto");
  EXPECT_EQ(grown.outcome.steps, 8);
  for (std::size_t i = 0; i < reference.params.size(); ++i) {
    EXPECT_LE((grown.params[i].second - reference.params[i].second).abs().max().item<double>(),
              1e-5)
        << reference.params[i].first << " (resumed sharded on the world from one rank)";
  }
}

}  // namespace
}  // namespace hpctrain::train
