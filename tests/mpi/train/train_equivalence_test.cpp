// Data-parallel training equals single-rank training with the whole global batch: after K steps
// the parameters of every rank match a reference run on one rank (MPI_COMM_SELF) within 1e-5,
// with and without gradient accumulation, bucketing and overlap. Evaluation of fixed weights is
// bit-identical at every world size.

#include <gtest/gtest.h>

#include <filesystem>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {
namespace {

const runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

// A small learnable problem: 4 classes of 16-dimensional points around class centres.
std::string dataset_dir() {
  static std::string dir = [] {
    int token = 0;
    if (rt().world_rank() == 0) token = static_cast<int>(getpid());
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string d = str("/tmp/hpctrain-train-test-", token);
    if (rt().world_rank() == 0) {
      std::filesystem::create_directories(d);
      auto gen = at::detail::createCPUGenerator(7);
      auto labels = torch::randint(0, 4, {240}, gen, torch::kLong);
      auto centres = torch::randn({4, 16}, gen);
      auto inputs = centres.index_select(0, labels) + 0.5 * torch::randn({240, 16}, gen);
      data::Provenance prov{"synthetic", "train_equivalence_test"};
      data::write_classification_file(d + "/train.h5", inputs, labels, 4, 1.0, prov);
      data::write_classification_file(d + "/val.h5", inputs.slice(0, 0, 101),
                                      labels.slice(0, 0, 101), 4, 1.0, prov);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

Config base_config(const std::string& run_dir, const std::string& optim) {
  Config c =
      Config::parse(str("run: {seed: 11, epochs: 1, max_steps: 6}\n"
                        "model: {name: mlp, in_features: 16, hidden: [32, 16], num_classes: 4}\n"
                        "data: {shuffle: true, prefetch: 2}\n"
                        "optim: {name: ",
                        optim,
                        ", lr: 0.05, momentum: 0.9}\n"
                        "eval: {at_end: false}\n"
                        "logging: {every_steps: 2, progress: off}\n"),
                    "<test>");
  if (optim != "sgd") c.set("optim.momentum=0");
  c.set("data.train=" + dataset_dir() + "/train.h5");
  c.set("run.dir=" + run_dir);
  return c;
}

using Params = std::vector<std::pair<std::string, torch::Tensor>>;

Params train_on(MPI_Comm base, Config config) {
  runtime::ProcessGrid grid(rt(), 1, base);
  runtime::DeviceBinding cpu;
  auto comms = comm::make_group_communicators(rt(), grid, cpu, "mpi");
  Trainer trainer(config, "unused", comm::Environment{rt(), grid, cpu, comms}, "none");
  trainer.run();
  return trainer.local_parameters();
}

void expect_close(const Params& a, const Params& b, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    double diff = (a[i].second - b[i].second).abs().max().item<double>();
    EXPECT_LT(diff, tol) << what << ": " << a[i].first << " differs by " << diff;
  }
}

struct Case {
  const char* name;
  const char* optim;
  int accumulation;
  double bucket_mb;
  bool overlap;
};

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, DataParallelMatchesOneRankWithTheGlobalBatch) {
  const Case c = GetParam();
  const int world = rt().world_size();
  const int b = 4;
  // Distributed: b per rank, accumulation K: global batch b * world * K.
  Config dist = base_config(str(dataset_dir(), "/dist-", c.name), c.optim);
  dist.set(str("data.batch_size=", b));
  dist.set(str("optim.grad_accumulation=", c.accumulation));
  dist.set(str("parallel.bucket_mb=", c.bucket_mb));
  dist.set(str("parallel.overlap=", c.overlap ? "true" : "false"));
  Params distributed = train_on(MPI_COMM_WORLD, dist);
  // Reference: one rank, the whole global batch at once, no accumulation.
  Config ref = base_config(str(dataset_dir(), "/ref-", c.name, "-", rt().world_rank()), c.optim);
  ref.set(str("data.batch_size=", b * world * c.accumulation));
  Params reference = train_on(MPI_COMM_SELF, ref);
  expect_close(distributed, reference, 1e-5, c.name);
  // And the replicas agree bitwise with rank 0 (they start identical and apply identical updates).
  for (auto& [name, tensor] : distributed) {
    auto copy = tensor.clone();
    MPI_Bcast(copy.data_ptr(), static_cast<int>(copy.numel()), MPI_FLOAT, 0, MPI_COMM_WORLD);
    EXPECT_TRUE(torch::equal(copy, tensor)) << name << " differs from rank 0's replica";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Train, Equivalence,
    ::testing::Values(Case{"sgd_one_bucket", "sgd", 1, 25, true},
                      Case{"adam_bucket_per_param", "adam", 1, 0, true},
                      Case{"adamw_small_buckets_no_overlap", "adamw", 1, 0.001, false},
                      Case{"sgd_accumulate2", "sgd", 2, 0, true},
                      Case{"adam_accumulate3_one_bucket", "adam", 3, 25, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Evaluation, FixedWeightsGiveIdenticalMetricsAtEveryWorldSize) {
  Config c = base_config(dataset_dir() + "/eval", "sgd");
  auto section = c.section("model");
  torch::manual_seed(3);
  auto model = model::build_model(section, model::ModelContext{});
  auto val = data::Dataset::open(dataset_dir() + "/val.h5");
  auto run = [&](MPI_Comm base, std::int64_t batch) {
    runtime::ProcessGrid grid(rt(), 1, base);
    runtime::DeviceBinding cpu;
    comm::ControlPlane dp(grid.dp_comm(), "dp");
    eval::EvalOptions options;
    options.batch_size = batch;
    return eval::evaluate(*model, *val, dp, options);
  };
  for (std::int64_t batch : {7, 16, 101, 1000}) {
    auto distributed = run(MPI_COMM_WORLD, batch);
    auto single = run(MPI_COMM_SELF, batch);
    EXPECT_EQ(distributed.samples, 101);
    EXPECT_EQ(single.samples, 101);
    EXPECT_EQ(distributed.loss, single.loss) << "batch " << batch;  // bitwise
    EXPECT_EQ(distributed.accuracy, single.accuracy) << "batch " << batch;
    EXPECT_GT(distributed.loss, 0.0);
  }
}

}  // namespace
}  // namespace hpctrain::train
