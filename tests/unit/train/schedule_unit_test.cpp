// CheckpointSchedule and EvalSchedule: every combination of step interval, time interval, end of
// run, stop request and deadline the training loop can present, and early stopping with the
// state a checkpoint carries across a resume.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "hpctrain/checkpoint/checkpoint_schedule.hpp"
#include "hpctrain/eval/eval_schedule.hpp"
#include "hpctrain/eval/evaluator.hpp"

namespace hpctrain {
namespace {

using checkpoint::CheckpointConfig;
using checkpoint::CheckpointSchedule;
using checkpoint::SaveReason;

CheckpointConfig every(std::int64_t steps, double minutes = 0, bool at_end = true) {
  CheckpointConfig c;
  c.every_steps = steps;
  c.every_minutes = minutes;
  c.at_end = at_end;
  return c;
}

TEST(CheckpointSchedule, StepIntervalEndAndNothingElse) {
  CheckpointSchedule s(every(100));
  EXPECT_EQ(s.reason(99, false, false, false), SaveReason::kNone);
  EXPECT_EQ(s.reason(100, false, false, false), SaveReason::kInterval);
  EXPECT_EQ(s.reason(250, true, false, false), SaveReason::kEnd);
  EXPECT_EQ(s.reason(300, true, false, false), SaveReason::kEnd);  // the end outranks the interval
  CheckpointSchedule never(every(0, 0, /*at_end=*/false));
  for (std::int64_t step : {1, 100, 1000}) {
    EXPECT_EQ(never.reason(step, step == 1000, false, false), SaveReason::kNone) << step;
  }
}

TEST(CheckpointSchedule, AStopRequestSavesWhateverTheCadence) {
  // A signal or the deadline (stop_requested) saves even with every cadence off.
  CheckpointSchedule s(every(0, 0, /*at_end=*/false));
  EXPECT_EQ(s.reason(17, true, true, false), SaveReason::kStop);
  CheckpointSchedule with_interval(every(10));
  EXPECT_EQ(with_interval.reason(20, true, true, true), SaveReason::kStop);
}

TEST(CheckpointSchedule, TimeIntervalIsLocalUntilAgreed) {
  CheckpointSchedule off(every(0, 0));
  EXPECT_FALSE(off.time_due());
  CheckpointSchedule later(every(0, 60));  // an hour
  EXPECT_FALSE(later.time_due());
  CheckpointSchedule soon(every(0, 0.001));  // 60 ms
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_TRUE(soon.time_due());
  // The loop passes the agreed value: another rank's clock may have said so.
  EXPECT_EQ(later.reason(5, false, false, /*time_due=*/true), SaveReason::kTime);
  EXPECT_EQ(later.reason(5, false, false, false), SaveReason::kNone);
  soon.saved(5);
  EXPECT_FALSE(soon.time_due());  // the interval restarts at every save
}

TEST(CheckpointSchedule, NeverSavesAStepTwice) {
  CheckpointSchedule s(every(10));
  s.saved(10);
  EXPECT_EQ(s.last_saved_step(), 10);
  EXPECT_EQ(s.reason(10, true, true, true), SaveReason::kNone);
  // A run resumed from step 40 does not save step 40 again at its end.
  CheckpointSchedule resumed(every(10), 40);
  EXPECT_EQ(resumed.reason(40, true, false, false), SaveReason::kNone);
  EXPECT_EQ(resumed.reason(50, false, false, false), SaveReason::kInterval);
}

TEST(CheckpointSchedule, ReasonNames) {
  EXPECT_STREQ(save_reason_name(SaveReason::kStop), "stop request");
  EXPECT_STREQ(save_reason_name(SaveReason::kEnd), "end of run");
  EXPECT_STREQ(save_reason_name(SaveReason::kInterval), "interval");
  EXPECT_STREQ(save_reason_name(SaveReason::kTime), "time interval");
}

eval::EvalResult result_with(double loss, double accuracy) {
  eval::EvalResult r;
  r.task = Task::kClassification;
  r.loss = loss;
  r.accuracy = accuracy;
  return r;
}

TEST(EvalSchedule, DueAtIntervalsAndTheEndOnlyWithData) {
  eval::EvalConfig c;
  c.every_steps = 50;
  eval::EvalSchedule s(c, true, eval::Metric::kAccuracy, {});
  EXPECT_FALSE(s.due(49, 120));
  EXPECT_TRUE(s.due(50, 120));
  EXPECT_TRUE(s.due(100, 120));
  EXPECT_TRUE(s.due(120, 120));  // at_end
  c.at_end = false;
  EXPECT_FALSE(eval::EvalSchedule(c, true, eval::Metric::kAccuracy, {}).due(120, 120));
  EXPECT_FALSE(eval::EvalSchedule(c, /*has_data=*/false, eval::Metric::kAccuracy, {}).due(50, 120));
  eval::EvalConfig end_only;
  eval::EvalSchedule e(end_only, true, eval::Metric::kLoss, {});
  EXPECT_FALSE(e.due(50, 120));
  EXPECT_TRUE(e.due(120, 120));
}

TEST(EvalSchedule, EarlyStoppingCountsEvaluationsWithoutGain) {
  eval::EvalConfig c;
  c.patience = 2;
  eval::EvalSchedule s(c, true, eval::Metric::kAccuracy, {});
  EXPECT_FALSE(s.record(result_with(1.0, 0.50), 10));
  EXPECT_FALSE(s.record(result_with(0.9, 0.60), 20));
  EXPECT_FALSE(s.record(result_with(0.8, 0.60), 30));  // a tie is no gain
  EXPECT_TRUE(s.record(result_with(0.7, 0.55), 40));   // second without gain: stop
  EXPECT_EQ(s.progress().best_step, 20);
  EXPECT_DOUBLE_EQ(s.progress().best_metric, 0.60);
  EXPECT_NE(s.early_stop_reason().find("accuracy did not improve for 2 evaluations"),
            std::string::npos);
  // Loss improves downward.
  eval::EvalSchedule by_loss(c, true, eval::Metric::kLoss, {});
  EXPECT_FALSE(by_loss.record(result_with(1.0, 0), 1));
  EXPECT_FALSE(by_loss.record(result_with(0.5, 0), 2));
  EXPECT_EQ(by_loss.progress().best_step, 2);
  // No patience: never stops.
  eval::EvalSchedule never(eval::EvalConfig{}, true, eval::Metric::kAccuracy, {});
  for (int k = 0; k < 10; ++k) EXPECT_FALSE(never.record(result_with(1, 0.1), k));
}

TEST(EvalSchedule, ProgressSurvivesACheckpointAndOwesAnInterruptedEvaluation) {
  eval::EvalConfig c;
  c.patience = 3;
  eval::EvalSchedule s(c, true, eval::Metric::kAccuracy, {});
  s.record(result_with(1, 0.7), 100);
  s.record(result_with(1, 0.6), 200);
  s.interrupted(300);
  nlohmann::json state;
  s.progress().to_json(state);
  const auto back = eval::EvalProgress::from_json(state);
  EXPECT_EQ(back.best_step, 100);
  EXPECT_EQ(back.evals_without_improvement, 1);
  EXPECT_EQ(back.interrupted_step, 300);
  eval::EvalSchedule resumed(c, true, eval::Metric::kAccuracy, back);
  EXPECT_TRUE(resumed.owes(300));
  EXPECT_FALSE(resumed.owes(301));
  resumed.record(result_with(1, 0.8), 300);
  EXPECT_FALSE(resumed.owes(300));  // evaluated: owed no more
  EXPECT_EQ(resumed.progress().best_step, 300);
  // A checkpoint without the field (older runs) owes nothing.
  EXPECT_EQ(eval::EvalProgress::from_json(nlohmann::json::object()).interrupted_step, -1);
  nlohmann::json plain;
  eval::EvalProgress{}.to_json(plain);
  EXPECT_FALSE(plain.contains("interrupted_eval_step"));
}

TEST(EvalSchedule, MetricDefaultsByTask) {
  EXPECT_EQ(eval::default_metric(Task::kClassification), eval::Metric::kAccuracy);
  EXPECT_EQ(eval::default_metric(Task::kLanguageModel), eval::Metric::kLoss);
  eval::EvalConfig c;
  EXPECT_EQ(c.metric_for(Task::kClassification), eval::Metric::kAccuracy);
  c.metric_set = true;
  c.metric = eval::Metric::kLoss;
  EXPECT_EQ(c.metric_for(Task::kClassification), eval::Metric::kLoss);
  EXPECT_TRUE(eval::higher_is_better(eval::Metric::kAccuracy));
  EXPECT_FALSE(eval::higher_is_better(eval::Metric::kPerplexity));
}

}  // namespace
}  // namespace hpctrain
