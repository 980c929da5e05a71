// The dynamic loss scaler (issue 12): GradScaler's rules with injected overflows, its config
// validation, and its state through the checkpoint's JSON.

#include <gtest/gtest.h>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/train/loss_scaler.hpp"
#include "hpctrain/train/train_config.hpp"

namespace hpctrain::train {
namespace {

LossScaleConfig small_window() {
  LossScaleConfig c;
  c.init = 1024;
  c.window = 3;
  return c;
}

TEST(LossScaler, DefaultsAreGradScalers) {
  LossScaleConfig c;
  EXPECT_DOUBLE_EQ(c.init, 65536.0);
  EXPECT_EQ(c.window, 2000);
  EXPECT_DOUBLE_EQ(c.growth, 2.0);
  EXPECT_DOUBLE_EQ(c.backoff, 0.5);
}

TEST(LossScaler, GrowsAfterAWindowOfGoodSteps) {
  LossScaler s(small_window(), true);
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  s.update(false);
  s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  EXPECT_EQ(s.good_steps(), 2);
  s.update(false);  // the third good step completes the window
  EXPECT_DOUBLE_EQ(s.scale(), 2048);
  EXPECT_EQ(s.good_steps(), 0);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 4096);
  EXPECT_EQ(s.skipped(), 0);
}

TEST(LossScaler, AnOverflowHalvesTheScaleAndRestartsTheWindow) {
  LossScaler s(small_window(), true);
  s.update(false);
  s.update(false);
  s.update(true);  // injected overflow one step before the window would have grown the scale
  EXPECT_DOUBLE_EQ(s.scale(), 512);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped(), 1);
  s.update(false);
  s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 512);  // the window counts from the overflow
  s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 1024);
  s.update(true);
  s.update(true);
  EXPECT_DOUBLE_EQ(s.scale(), 256);
  EXPECT_EQ(s.skipped(), 3);
}

TEST(LossScaler, ReportsFallingBelowTheMinimum) {
  LossScaleConfig c = small_window();
  c.init = 2;
  LossScaler s(c, true);
  s.update(true);
  EXPECT_FALSE(s.below_min());  // 1 is the minimum itself
  s.update(true);
  EXPECT_TRUE(s.below_min());
}

TEST(LossScaler, DisabledIsTheIdentity) {
  LossScaler s(small_window(), false);
  s.update(true);
  s.update(false);
  EXPECT_DOUBLE_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped(), 0);
  EXPECT_FALSE(s.below_min());
}

TEST(LossScaler, StateRoundTripsThroughJson) {
  LossScaler a(small_window(), true);
  a.update(false);
  a.update(true);
  a.update(false);
  a.update(false);
  LossScaler b(small_window(), true);
  b.restore(nlohmann::json::parse(a.to_json().dump()));
  EXPECT_DOUBLE_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.good_steps(), a.good_steps());
  EXPECT_EQ(b.skipped(), a.skipped());
  a.update(false);
  b.update(false);
  EXPECT_DOUBLE_EQ(b.scale(), a.scale());  // the restored window completes at the same step
  EXPECT_DOUBLE_EQ(b.scale(), 1024);
  LossScaler fresh(small_window(), true);
  fresh.restore(nlohmann::json());  // a checkpoint of a run without scaling
  EXPECT_DOUBLE_EQ(fresh.scale(), 1024);
}

TEST(LossScaler, RejectsADamagedState) {
  LossScaler s(small_window(), true);
  for (const char* bad : {R"("x")", R"({"good_steps": 1, "skipped": 0})",
                          R"({"scale": 1000, "good_steps": 1, "skipped": 0})",
                          R"({"scale": 1024, "good_steps": -1, "skipped": 0})",
                          R"({"scale": 1024, "good_steps": 1})"}) {
    EXPECT_THROW(s.restore(nlohmann::json::parse(bad)), CheckpointError) << bad;
  }
}

std::string train_error(const std::string& yaml) {
  try {
    Config c = Config::parse(yaml, "t.yaml");
    TrainConfig::from(c, "runs/x");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LossScaler, ConfigResolvesAutoAgainstThePrecision) {
  auto parse = [](const std::string& yaml) {
    Config c = Config::parse(yaml, "t.yaml");
    return TrainConfig::from(c, "runs/x");
  };
  EXPECT_FALSE(parse("run: {}\n").loss_scaling);
  EXPECT_FALSE(parse("run: {precision: bf16}\n").loss_scaling);
  EXPECT_TRUE(parse("run: {precision: fp16}\n").loss_scaling);
  EXPECT_EQ(parse("run: {precision: fp16}\n").run.precision, Precision::kFp16);
  EXPECT_FALSE(parse("run: {precision: fp16}\noptim: {loss_scale: none}\n").loss_scaling);
  const auto t = parse("optim: {loss_scale: dynamic, loss_scale_window: 7}\n");
  EXPECT_TRUE(t.loss_scaling);
  EXPECT_EQ(t.optim.loss_scale.window, 7);
  EXPECT_EQ(autocast_dtype(Precision::kFp16), at::kHalf);
  EXPECT_EQ(autocast_dtype(Precision::kBf16), at::kBFloat16);
  EXPECT_EQ(autocast_dtype(Precision::kFp32), at::kFloat);
}

TEST(LossScaler, ConfigValidationNamesTheKey) {
  EXPECT_NE(train_error("optim: {loss_scale_init: 1000}\n").find("optim.loss_scale_init"),
            std::string::npos);
  EXPECT_NE(train_error("optim: {loss_scale_window: 0}\n").find("optim.loss_scale_window"),
            std::string::npos);
  EXPECT_NE(train_error("optim: {loss_scale_growth: 1}\n").find("optim.loss_scale_growth"),
            std::string::npos);
  EXPECT_NE(train_error("optim: {loss_scale_backoff: 0.3}\n").find("optim.loss_scale_backoff"),
            std::string::npos);
  EXPECT_NE(train_error("optim: {loss_scale: static}\n").find("auto, dynamic, none"),
            std::string::npos);
  EXPECT_NE(train_error("run: {precision: fp8}\n").find("fp16"), std::string::npos);
}

}  // namespace
}  // namespace hpctrain::train
