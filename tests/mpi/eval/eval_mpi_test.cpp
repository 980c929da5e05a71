// The eval layer on 1-4 ranks: the evaluator's metrics do not depend on the world size, the
// prefetch depth or the sample limit's position in a batch; the batch size search returns the
// same choice on every rank and respects its memory budget; the result store writes, finds,
// repairs and ranks results; OfflineEvaluator evaluates a saved checkpoint exactly as a
// single-process evaluation of the same weights, and skips it the second time.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/eval/batch_size_search.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/offline_evaluator.hpp"
#include "hpctrain/eval/result_store.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {
namespace {

namespace fs = std::filesystem;

const runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

const char* kConfig =
    "run: {dir: unused, seed: 3, precision: fp32}\n"
    "model: {name: mlp, in_features: 16, hidden: [24], num_classes: 5}\n"
    "data: {train: TRAIN, val: VAL, batch_size: 8}\n"
    "eval: {batch_size: 13, max_samples: 0}\n";

// A scratch directory shared by all ranks, with 203 samples of 16 features in 5 classes.
std::string scratch() {
  static std::string dir = [] {
    int token = 0;
    if (rt().world_rank() == 0) token = static_cast<int>(getpid());
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string d = str("/tmp/hpctrain-eval-test-", token);
    if (rt().world_rank() == 0) {
      fs::remove_all(d);
      fs::create_directories(d);
      auto gen = at::detail::createCPUGenerator(5);
      auto labels = torch::randint(0, 5, {203}, gen, torch::kLong);
      auto inputs = torch::randn({203, 16}, gen);
      data::Provenance prov{"synthetic", "eval_mpi_test"};
      data::write_classification_file(d + "/val.h5", inputs, labels, 5, 1.0, prov);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

std::string config_text() {
  std::string text = kConfig;
  text.replace(text.find("TRAIN"), 5, scratch() + "/val.h5");
  text.replace(text.find("VAL"), 3, scratch() + "/val.h5");
  return text;
}

struct Grid {
  explicit Grid(MPI_Comm base) : grid(rt(), 1, base) {
    comms = comm::make_group_communicators(rt(), grid, cpu, "mpi");
    control = comm::make_control_groups(grid);
  }
  runtime::ProcessGrid grid;
  runtime::DeviceBinding cpu;
  comm::GroupCommunicators comms;
  comm::ControlGroups control;
};

std::shared_ptr<model::Model> make_model(std::uint64_t seed) {
  RunConfig config(config_text(), "<test>");
  torch::manual_seed(seed);
  return config.build_model(model::ModelContext{});
}

TEST(Evaluator, SameMetricsAtAnyWorldSizePrefetchAndLimit) {
  auto model = make_model(1);
  auto val = data::Dataset::open(scratch() + "/val.h5");
  Grid world(MPI_COMM_WORLD);
  Grid self(MPI_COMM_SELF);
  for (std::int64_t batch : {1, 13, 64, 500}) {
    for (std::int64_t max_samples : {0, 100}) {
      EvalOptions options;
      options.batch_size = batch;
      options.max_samples = max_samples;
      const EvalResult reference = evaluate(*model, *val, *self.control.dp, options);
      for (int prefetch : {0, 1, 3}) {
        options.prefetch = prefetch;
        const EvalResult r = evaluate(*model, *val, *world.control.dp, options);
        EXPECT_EQ(r.samples, max_samples ? 100 : 203);
        EXPECT_EQ(r.loss, reference.loss) << "batch " << batch << " prefetch " << prefetch;
        EXPECT_EQ(r.accuracy, reference.accuracy) << "batch " << batch;
        EXPECT_GE(r.data_wait_seconds, 0.0);
      }
    }
  }
}

TEST(BatchSizeSearch, EveryRankChoosesTheSameAndTheBudgetStopsIt) {
  auto model = make_model(1);
  auto val = data::Dataset::open(scratch() + "/val.h5");
  Grid world(MPI_COMM_WORLD);
  BatchSearchOptions options;
  options.samples = 203;
  options.seconds_per_size = 0.01;
  BatchSearchResult r =
      search_batch_size(*model, *val, *world.control.dp, *world.control.world, options);
  ASSERT_FALSE(r.trials.empty());
  EXPECT_EQ(r.trials.front().batch, 16);
  for (std::size_t i = 1; i < r.trials.size(); ++i) {
    EXPECT_EQ(r.trials[i].batch, std::min<std::int64_t>(2 * r.trials[i - 1].batch, 203));
  }
  auto chosen = torch::tensor({r.chosen}, torch::kLong);
  auto all = world.comms.world->all_gather(chosen);
  EXPECT_TRUE(all.eq(r.chosen).all().item<bool>()) << all;
  EXPECT_FALSE(format_trials(r).empty());

  options.memory_budget = 1;  // nothing fits beyond the first size
  r = search_batch_size(*model, *val, *world.control.dp, *world.control.world, options);
  EXPECT_EQ(r.chosen, 16);
  EXPECT_EQ(r.trials.size(), 1u);
  EXPECT_NE(r.stop_reason.find("over the budget"), std::string::npos) << r.stop_reason;
}

TEST(RunConfig, SplitsAndDefaults) {
  RunConfig config(config_text(), "<test>");
  EXPECT_EQ(config.eval_batch_size(), 13);
  EXPECT_EQ(config.split_path("val"), scratch() + "/val.h5");
  EXPECT_EQ(config.splits(), (std::vector<std::string>{"train", "val"}));
  try {
    config.split_path("test");
    FAIL() << "no data.test: expected an error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown split 'test'"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
  RunConfig test_split(
      std::string(config_text())
          .replace(config_text().find("batch_size: 8"), 13, "batch_size: 8, test: T.h5"),
      "<test>");
  EXPECT_EQ(test_split.split_path("test"), "T.h5");
  auto model = make_model(1);
  auto records = model_records(*model);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].name, "model/fc1.weight");
  EXPECT_EQ(records[0].shard.logical_shape, (std::vector<std::int64_t>{24, 16}));
}

TEST(ResultStore, WritesFindsRepairsAndRanks) {
  if (rt().world_rank() != 0) return;  // the store is rank 0's
  const std::string dir = scratch() + "/store";
  ResultStore store(dir);
  EvalKey key{10, "abc", "val", "d1", "13", 0, "fp32", ""};
  EXPECT_FALSE(store.has(key));
  EXPECT_FALSE(fs::exists(dir)) << "has() must not create anything";
  auto record = [&](const EvalKey& k, double accuracy) {
    return nlohmann::ordered_json{
        {"step", k.step}, {"split", k.split},    {"accuracy", accuracy},  {"loss", 1.0 - accuracy},
        {"samples", 203}, {"eval_seconds", 0.1}, {"samples_per_s", 2030}, {"key", k.to_json()}};
  };
  store.write(key, record(key, 0.5), "accuracy", true);
  EXPECT_TRUE(store.has(key));
  EXPECT_TRUE(fs::exists(dir + "/step_00000010.json"));
  EvalKey later = key;
  later.step = 20;
  later.checkpoint_xxh3 = "def";
  auto best = store.write(later, record(later, 0.7), "accuracy", true);
  EXPECT_EQ(best.at("step"), 20);
  EvalKey other = later;
  other.tag = "bf16";
  other.precision = "bf16";
  store.write(other, record(other, 0.1), "accuracy", true);
  EXPECT_TRUE(fs::exists(dir + "/step_00000020.bf16.json"));
  EXPECT_EQ(store.family_records(key).size(), 2u);
  EXPECT_EQ(store.family_records(other).size(), 1u);
  std::ifstream best_file(dir + "/best.json");
  EXPECT_EQ(nlohmann::json::parse(best_file).at("step"), 20);

  // A crash after the step file but before the results.jsonl line: has() restores the line.
  std::vector<std::string> lines;
  {
    std::ifstream in(dir + "/results.jsonl");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 3u);
  {
    std::ofstream out(dir + "/results.jsonl", std::ios::trunc);
    out << lines[1] << "\n"
        << lines[2] << "\n"
        << "{\"cut short";  // and a torn line
  }
  EXPECT_TRUE(store.has(key));
  EXPECT_TRUE(store.has(key));
  std::ifstream in(dir + "/results.jsonl");
  int step10 = 0;
  for (std::string line; std::getline(in, line);) {
    step10 += line.find("\"step\":10") != std::string::npos;
  }
  EXPECT_EQ(step10, 1);
  // Another checkpoint of the same step (another run in the same place) is not "done".
  EvalKey retrained = key;
  retrained.checkpoint_xxh3 = "xyz";
  EXPECT_FALSE(store.has(retrained));
}

TEST(OfflineEvaluator, EvaluatesASavedCheckpointExactlyOnce) {
  const std::string run = scratch() + "/run";
  auto model = make_model(9);
  Grid world(MPI_COMM_WORLD);
  Grid self(MPI_COMM_SELF);
  {
    // Saved as training saves (collective, every rank has the same weights).
    checkpoint::ManagerOptions manager_options;
    manager_options.background = false;
    checkpoint::CheckpointManager manager(run, world.grid, manager_options);
    checkpoint::SaveContent content;
    content.step = 7;
    content.tensors = model_records(*model);
    content.copy = true;
    content.config_text = config_text();
    manager.save(std::move(content));
    manager.wait();
  }
  auto val = data::Dataset::open(scratch() + "/val.h5");
  EvalOptions options;
  options.batch_size = 13;
  const EvalResult reference = evaluate(*model, *val, *self.control.dp, options);

  OfflineOptions offline;
  offline.prefetch = 1;
  {
    OfflineEvaluator evaluator(comm::Environment{rt(), world.grid, world.cpu, world.comms},
                               offline);
    EXPECT_EQ(evaluator.evaluate_checkpoint(run), 0);
    EXPECT_EQ(evaluator.evaluate_run(run), 0);  // already evaluated: nothing new
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::ifstream in(run + "/eval/step_00000007.json");
  ASSERT_TRUE(in.good());
  const auto r = nlohmann::json::parse(in);
  EXPECT_EQ(r.at("loss").get<double>(), reference.loss);
  EXPECT_EQ(r.at("accuracy").get<double>(), reference.accuracy);
  EXPECT_EQ(r.at("samples").get<std::int64_t>(), 203);
  EXPECT_EQ(r.at("world_size").get<int>(), rt().world_size());
  std::ifstream results(run + "/eval/results.jsonl");
  int lines = 0;
  for (std::string line; std::getline(results, line);) ++lines;
  EXPECT_EQ(lines, 1);
}

}  // namespace
}  // namespace hpctrain::eval
