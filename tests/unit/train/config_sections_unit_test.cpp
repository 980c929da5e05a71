// Each config section's struct, parsed once by the layer that owns it: defaults declared there,
// enums instead of strings, and validation that names the key and says why.

#include <gtest/gtest.h>

#include <functional>

#include "hpctrain/checkpoint/checkpoint_schedule.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The ConfigError of parsing `yaml` with the whole training config, or "".
std::string train_error(const std::string& yaml) {
  return error_of([&] {
    Config c = Config::parse(yaml, "t.yaml");
    train::TrainConfig::from(c, "runs/x");
  });
}

void expect_error(const std::string& yaml, const std::string& key, const std::string& why) {
  const std::string e = train_error(yaml);
  EXPECT_NE(e.find(key), std::string::npos) << yaml << " -> " << e;
  EXPECT_NE(e.find(why), std::string::npos) << yaml << " -> " << e;
}

TEST(ConfigSections, DefaultsAreDeclaredByTheirLayers) {
  Config c = Config::parse("run: {}\n", "t.yaml");
  const auto t = train::TrainConfig::from(c, "runs/x");
  EXPECT_EQ(t.run.dir, "runs/x");
  EXPECT_EQ(t.run.precision, train::Precision::kFp32);
  EXPECT_FALSE(t.run.tf32.has_value());  // LibTorch's default (matmul off, cuDNN on)
  EXPECT_EQ(t.parallel.tp, 1);
  EXPECT_DOUBLE_EQ(t.parallel.bucket_mb, 25);
  EXPECT_EQ(t.parallel.bucket_bytes(), 25LL * 1024 * 1024);  // MiB
  EXPECT_TRUE(t.parallel.overlap);
  EXPECT_EQ(t.eval.batch_size, eval::EvalConfig::kDefaultBatchSize);
  EXPECT_FALSE(t.eval.metric_set);
  EXPECT_EQ(t.checkpoint.keep, 2);
  EXPECT_TRUE(t.checkpoint.at_end);
  EXPECT_EQ(t.optim.kind, train::OptimizerKind::kAdam);
  EXPECT_EQ(t.optim.on_nonfinite, train::NonFinitePolicy::kStop);
  EXPECT_EQ(t.schedule.kind, train::LrSchedule::Kind::kConstant);
  EXPECT_EQ(t.logging.progress, train::ProgressMode::kAuto);
  EXPECT_EQ(t.debug.stop_rank, -1);
  // The defaults are recorded into the resolved config a run writes.
  EXPECT_NE(c.dump().find("bucket_mb: 25"), std::string::npos) << c.dump();
}

TEST(ConfigSections, EnumsParseFromTheirNames) {
  Config c = Config::parse(
      "run: {precision: bf16}\noptim: {name: adamw, on_nonfinite: skip}\n"
      "schedule: {name: cosine}\nlogging: {progress: plain}\neval: {metric: perplexity}\n",
      "t.yaml");
  const auto t = train::TrainConfig::from(c, "runs/x");
  EXPECT_EQ(t.run.precision, train::Precision::kBf16);
  EXPECT_STREQ(train::precision_name(t.run.precision), "bf16");
  EXPECT_EQ(t.optim.kind, train::OptimizerKind::kAdamW);
  EXPECT_DOUBLE_EQ(t.optim.weight_decay, 0.01);  // AdamW's default decay
  EXPECT_EQ(t.optim.on_nonfinite, train::NonFinitePolicy::kSkip);
  EXPECT_EQ(t.schedule.kind, train::LrSchedule::Kind::kCosine);
  EXPECT_EQ(t.logging.progress, train::ProgressMode::kPlain);
  EXPECT_TRUE(t.eval.metric_set);
  EXPECT_EQ(t.eval.metric, eval::Metric::kPerplexity);
  EXPECT_STREQ(eval::metric_name(t.eval.metric), "perplexity");
}

// run.tf32 (issue 26, item 9): a bool, absent meaning LibTorch's default; a non-bool names it.
TEST(ConfigSections, Tf32IsABoolOrLibTorchsDefault) {
  for (bool on : {false, true}) {
    Config c = Config::parse(on ? "run: {tf32: true}\n" : "run: {tf32: false}\n", "t.yaml");
    const auto t = train::TrainConfig::from(c, "runs/x");
    ASSERT_TRUE(t.run.tf32.has_value());
    EXPECT_EQ(*t.run.tf32, on);
  }
  EXPECT_NE(train_error("run: {tf32: sometimes}\n").find("run.tf32"), std::string::npos);
}

TEST(ConfigSections, EachSectionNamesTheBadKey) {
  expect_error("run: {precision: fp8}\n", "run.precision", "must be one of fp32, bf16");
  expect_error("optim: {name: lamb}\n", "optim.name", "must be one of sgd, adam, adamw");
  expect_error("optim: {on_nonfinite: ignore}\n", "optim.on_nonfinite", "stop, skip");
  expect_error("schedule: {name: linear}\n", "schedule.name", "constant, cosine, step");
  expect_error("logging: {progress: fancy}\n", "logging.progress", "auto, live, plain, off");
  expect_error("parallel: {tp: 0}\n", "parallel.tp", "positive integer");
  expect_error("parallel: {bucket_mb: -1}\n", "parallel.bucket_mb", ">= 0");
  expect_error("eval: {batch_size: 0}\n", "eval.batch_size", "at least 1");
  expect_error("eval: {every_steps: -5}\n", "eval.every_steps", ">= 0");
  expect_error("eval: {metric: f1}\n", "eval.metric", "loss, accuracy, perplexity, mse, mae");
  expect_error("eval: {patience: -1}\n", "eval.patience", ">= 0");
  expect_error("eval: {max_samples: -1}\n", "eval.max_samples", ">= 0");
  expect_error("checkpoint: {keep: 1}\n", "checkpoint.keep", "at least 2");
  expect_error("checkpoint: {every_steps: -1}\n", "checkpoint.every_steps", ">= 0");
  expect_error("checkpoint: {every_minutes: -1}\n", "checkpoint.every_minutes", ">= 0");
  expect_error("run: {epochs: 0}\n", "run.epochs", "at least 1");
  expect_error("run: {time_limit: soon}\n", "run.time_limit", "not a duration");
  expect_error("optim: {lr: 0}\n", "optim.lr", "positive");
  expect_error("parallel: {tp: two}\n", "parallel.tp", "");
}

TEST(ConfigSections, ParallelTpIsReadInOnePlace) {
  Config c = Config::parse("parallel: {tp: 4}\n", "t.yaml");
  EXPECT_EQ(parallel::ParallelConfig::of(c).tp, 4);
  EXPECT_EQ(train::TrainConfig::from(c, "runs/x").parallel.tp, 4);
  Config bad = Config::parse("parallel: {tp: -2}\n", "t.yaml");
  EXPECT_NE(error_of([&] { parallel::ParallelConfig::of(bad); }).find("parallel.tp"),
            std::string::npos);
}

TEST(ConfigSections, SectionsParseOnTheirOwn) {
  Config c = Config::parse("checkpoint: {every_minutes: 1.5, keep: 3}\neval: {every_steps: 7}\n",
                           "t.yaml");
  auto ck = c.section("checkpoint");
  const auto k = checkpoint::CheckpointConfig::from(ck);
  EXPECT_DOUBLE_EQ(k.every_minutes, 1.5);
  EXPECT_EQ(k.keep, 3);
  auto ev = c.section("eval");
  EXPECT_EQ(eval::EvalConfig::from(ev).every_steps, 7);
}

}  // namespace
}  // namespace hpctrain
