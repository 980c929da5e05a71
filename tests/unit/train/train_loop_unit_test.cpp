// The components the training loop orchestrates, alone: the step clock (carried and excluded
// time, on a clock the test drives) and the stop policy (an agreed signal, the deadline, early
// stopping and completion, each turned into one reason and exit code).

#include <gtest/gtest.h>

#include <csignal>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/train/step_clock.hpp"
#include "hpctrain/train/stop_policy.hpp"

namespace hpctrain::train {
namespace {

using Clock = StepClock::Clock;

// A clock that moves only when the test says so.
struct ManualClock {
  Clock::time_point now{};
  void advance(double seconds) {
    now += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  StepClock::Now source() {
    return [this] { return now; };
  }
};

TEST(StepClock, AStepIsItsOwnTimePlusTheLoopTimeCarriedFromTheLastOne) {
  ManualClock t;
  StepClock clock(t.source());
  PhaseSeconds phases;
  clock.begin_step();
  t.advance(2.0);  // data wait and the update
  EXPECT_DOUBLE_EQ(clock.end_step(phases), 2.0);
  t.advance(0.5);  // logging and the stop agreement: carried into the next step
  clock.end_iteration();
  EXPECT_DOUBLE_EQ(clock.carried(), 0.5);
  clock.begin_step();
  t.advance(1.0);
  EXPECT_DOUBLE_EQ(clock.end_step(phases), 1.5);
  EXPECT_DOUBLE_EQ(phases.train_wall, 3.5);
}

TEST(StepClock, EvaluationsAndSavesAreExcluded) {
  ManualClock t;
  StepClock clock(t.source());
  PhaseSeconds phases;
  clock.begin_step();
  t.advance(1.0);
  clock.end_step(phases);
  t.advance(0.25);                          // logging
  clock.exclude([&] { t.advance(10.0); });  // an evaluation
  t.advance(0.25);                          // the stop agreement
  clock.exclude_seconds(4.0);               // a save the checkpointer timed
  t.advance(4.0);
  clock.end_iteration();
  EXPECT_DOUBLE_EQ(clock.carried(), 0.5);
  clock.begin_step();
  t.advance(1.0);
  EXPECT_DOUBLE_EQ(clock.end_step(phases), 1.5);
  EXPECT_DOUBLE_EQ(phases.train_wall, 2.5);  // the loop's 16.5 s less the 14 s excluded
}

TEST(StepClock, NothingIsCarriedWhenExclusionsCoverTheIteration) {
  ManualClock t;
  StepClock clock(t.source());
  PhaseSeconds phases;
  clock.begin_step();
  clock.end_step(phases);
  clock.exclude_seconds(3.0);  // measured by the caller, overlapping the clock's own reading
  t.advance(2.0);
  clock.end_iteration();
  EXPECT_DOUBLE_EQ(clock.carried(), 0.0);
  // Exclusions do not leak into the next iteration.
  clock.begin_step();
  clock.end_step(phases);
  t.advance(1.0);
  clock.end_iteration();
  EXPECT_DOUBLE_EQ(clock.carried(), 1.0);
}

comm::StopRequest agreed(int signal, bool deadline) {
  comm::StopRequest r;
  r.signal = signal;
  r.deadline = deadline;
  return r;
}

TEST(StopPolicy, NothingAgreedRunsToTheEnd) {
  StopPolicy policy("run.time_limit");
  EXPECT_FALSE(policy.apply(agreed(0, false), 0));
  EXPECT_FALSE(policy.stopping());
  EXPECT_FALSE(policy.must_save());
  EXPECT_FALSE(policy.last_step(9, 10));
  EXPECT_TRUE(policy.last_step(10, 10));
  const TrainOutcome o = policy.outcome(10);
  EXPECT_EQ(o.steps, 10);
  EXPECT_EQ(o.reason, "completed");
  EXPECT_EQ(o.exit_code, 0);
}

TEST(StopPolicy, AnAgreedSignalSavesAndAsksForARequeue) {
  StopPolicy policy("run.time_limit");
  // The agreed signal is StopAgreement::signal(): it may have been agreed between evaluation
  // batches, so it counts whatever this request says.
  EXPECT_TRUE(policy.apply(agreed(0, false), SIGTERM));
  EXPECT_TRUE(policy.stopping());
  EXPECT_TRUE(policy.must_save());
  EXPECT_TRUE(policy.last_step(3, 10));
  const TrainOutcome o = policy.outcome(3);
  EXPECT_EQ(o.reason, "SIGTERM received: saved, requeue to resume");
  EXPECT_EQ(o.exit_code, kExitRequeue);
}

TEST(StopPolicy, TheDeadlineNamesItsSourceAndASignalWinsOverIt) {
  StopPolicy slurm("the Slurm job's time limit");
  EXPECT_TRUE(slurm.apply(agreed(0, true), 0));
  EXPECT_EQ(slurm.outcome(5).reason,
            "time limit (the Slurm job's time limit): saved, requeue to resume");
  EXPECT_EQ(slurm.outcome(5).exit_code, kExitRequeue);
  StopPolicy both("run.time_limit");
  EXPECT_TRUE(both.apply(agreed(SIGUSR1, true), SIGUSR1));
  EXPECT_EQ(both.outcome(5).reason, "SIGUSR1 received: saved, requeue to resume");
}

TEST(StopPolicy, EarlyStoppingCompletesUnlessASignalFollows) {
  StopPolicy policy("run.time_limit");
  policy.early_stop("early stopping: loss did not improve for 2 evaluations");
  EXPECT_TRUE(policy.stopping());
  EXPECT_FALSE(policy.must_save());  // saved as the end of the run, not to be resumed
  EXPECT_EQ(policy.outcome(4).exit_code, 0);
  EXPECT_EQ(policy.outcome(4).reason, "early stopping: loss did not improve for 2 evaluations");
  EXPECT_FALSE(policy.apply(agreed(0, false), 0));
  EXPECT_EQ(policy.outcome(4).exit_code, 0);
  // The same step's agreement brought a signal: the run must be resumed (the evaluation or its
  // save may be incomplete), so the signal decides.
  EXPECT_TRUE(policy.apply(agreed(SIGINT, false), SIGINT));
  EXPECT_EQ(policy.outcome(4).exit_code, kExitRequeue);
  EXPECT_TRUE(policy.must_save());
}

}  // namespace
}  // namespace hpctrain::train
