// The checkpointer's decision after a step, from agreed values only: a background save every rank
// has finished is collected, a signal or the deadline saves, a due time interval saves, the end
// of the run saves, and a step already saved is not saved again. (checkpointer_mpi_test runs the
// decision on real ranks, with background saves that finish and fail.)

#include <gtest/gtest.h>

#include "hpctrain/checkpoint/checkpointer.hpp"

namespace hpctrain::checkpoint {
namespace {

CheckpointConfig config(std::int64_t every_steps, double every_minutes = 0, bool at_end = true) {
  CheckpointConfig c;
  c.every_steps = every_steps;
  c.every_minutes = every_minutes;
  c.at_end = at_end;
  return c;
}

comm::StopRequest agreed(bool pending = false, bool writing = false, bool save_due = false) {
  comm::StopRequest r;
  r.save_pending = pending;
  r.save_writing = writing;
  r.save_due = save_due;
  return r;
}

StepDecision decision(bool collect, SaveReason save) {
  StepDecision d;
  d.collect = collect;
  d.save = save;
  return d;
}

TEST(CheckpointerDecision, AQuietStepDoesNothing) {
  CheckpointSchedule s(config(100));
  EXPECT_EQ(decide_after_step(s, 7, agreed(), false, false), decision(false, SaveReason::kNone));
}

TEST(CheckpointerDecision, ABackgroundSaveIsCollectedOnceEveryRankFinishedWritingIt) {
  CheckpointSchedule s(config(100));
  // Still written on some rank: wait for a later step, do not block this one.
  EXPECT_EQ(decide_after_step(s, 7, agreed(true, true), false, false),
            decision(false, SaveReason::kNone));
  // Every writer finished (successfully or not): collect now, so a failure ends the run here.
  EXPECT_EQ(decide_after_step(s, 8, agreed(true, false), false, false),
            decision(true, SaveReason::kNone));
  // Nothing in flight: nothing to collect.
  EXPECT_EQ(decide_after_step(s, 9, agreed(false, false), false, false),
            decision(false, SaveReason::kNone));
}

TEST(CheckpointerDecision, ASignalOrTheDeadlineSavesWhateverTheCadence) {
  // The stop policy turns an agreed signal or deadline into stop_save (and last_step).
  CheckpointSchedule off(config(0, 0, /*at_end=*/false));
  EXPECT_EQ(decide_after_step(off, 13, agreed(), true, /*stop_save=*/true),
            decision(false, SaveReason::kStop));
  // With a finished background save, both: collect it, then save.
  EXPECT_EQ(decide_after_step(off, 13, agreed(true, false), true, true),
            decision(true, SaveReason::kStop));
}

TEST(CheckpointerDecision, AnAgreedTimeIntervalSaves) {
  CheckpointSchedule s(config(0, 60));
  EXPECT_EQ(decide_after_step(s, 5, agreed(false, false, /*save_due=*/true), false, false),
            decision(false, SaveReason::kTime));
  // Only the agreed value counts: this rank's clock (an hour to go) is not asked.
  EXPECT_EQ(decide_after_step(s, 5, agreed(), false, false), decision(false, SaveReason::kNone));
}

TEST(CheckpointerDecision, TheEndAndTheStepIntervalSaveButNeverTheSameStepTwice) {
  CheckpointSchedule s(config(10));
  EXPECT_EQ(decide_after_step(s, 10, agreed(), false, false),
            decision(false, SaveReason::kInterval));
  EXPECT_EQ(decide_after_step(s, 17, agreed(), /*last_step=*/true, false),
            decision(false, SaveReason::kEnd));
  s.saved(17);
  EXPECT_EQ(decide_after_step(s, 17, agreed(false, false, true), true, true),
            decision(false, SaveReason::kNone));
  // A run resumed from the checkpoint of step 20 does not save step 20 again.
  CheckpointSchedule resumed(config(10), /*last_saved_step=*/20);
  EXPECT_EQ(decide_after_step(resumed, 20, agreed(), true, true),
            decision(false, SaveReason::kNone));
}

}  // namespace
}  // namespace hpctrain::checkpoint
