#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "hpctrain/runtime/abort_hooks.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain {
namespace {

TEST(Strings, FormatBytes) {
  EXPECT_EQ(format_bytes(3), "3 B");
  EXPECT_EQ(format_bytes(64 * 1024), "64 KiB");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024), "1.5 MiB");
  EXPECT_EQ(format_bytes(2.0 * 1024 * 1024 * 1024), "2 GiB");
}

TEST(Strings, ParseBytes) {
  EXPECT_EQ(parse_bytes("65536", "x"), 65536u);
  EXPECT_EQ(parse_bytes("64K", "x"), 65536u);
  EXPECT_EQ(parse_bytes("25MiB", "x"), 25u * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1g", "x"), 1024u * 1024 * 1024);
  EXPECT_EQ(parse_bytes("0.5M", "x"), 512u * 1024);
  try {
    parse_bytes("12 parsecs", "bucket_size");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bucket_size"), std::string::npos);
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
  EXPECT_THROW(parse_bytes("lots", "x"), ConfigError);
  EXPECT_THROW(parse_bytes("-4K", "x"), ConfigError);
}

TEST(Grid, ValidShapes) {
  for (int world : {1, 2, 3, 4, 6, 8, 12}) {
    for (int tp = 1; tp <= world; ++tp) {
      if (world % tp != 0) continue;
      auto shape = runtime::validate_grid(world, tp);
      EXPECT_EQ(shape.dp * shape.tp, world);
      EXPECT_EQ(shape.tp, tp);
    }
  }
}

TEST(Grid, IndivisibleWorldIsAClearError) {
  try {
    runtime::validate_grid(6, 4);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("world size 6 is not divisible by parallel.tp = 4"), std::string::npos)
        << message;
    EXPECT_NE(message.find("mpirun -np 8"), std::string::npos) << message;
  }
  EXPECT_THROW(runtime::validate_grid(4, 0), ConfigError);
  EXPECT_THROW(runtime::validate_grid(4, -2), ConfigError);
}

TEST(StopSignals, InTheStepLoopASignalOnlySetsTheFlag) {
  runtime::install_stop_signal_handlers();
  runtime::StopModeScope agree(runtime::StopMode::kAgree);
  runtime::clear_stop_request();
  EXPECT_EQ(runtime::stop_signal_received(), 0);
  std::raise(SIGUSR1);
  EXPECT_EQ(runtime::stop_signal_received(), SIGUSR1);
  EXPECT_STREQ(runtime::signal_name(runtime::stop_signal_received()), "SIGUSR1");
  runtime::clear_stop_request();
  std::raise(SIGTERM);
  EXPECT_EQ(runtime::stop_signal_received(), SIGTERM);
  runtime::clear_stop_request();
}

// Issue 18: outside the step loop nothing reads the flag, and a process blocked in open(2) of a
// FIFO never would: the signal ends the process at once with 75 and one line.
TEST(StopSignals, OutsideTheStepLoopASignalExitsAt75) {
  EXPECT_EXIT(
      {
        runtime::install_stop_signal_handlers("test");
        std::raise(SIGTERM);
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(75),
      "test: SIGTERM received outside the training step loop: nothing to save, exiting now with "
      "75");
  // The scope restores kExit after the loop.
  runtime::install_stop_signal_handlers();
  { runtime::StopModeScope agree(runtime::StopMode::kAgree); }
  EXPECT_EQ(runtime::stop_mode(), runtime::StopMode::kExit);
}

// Issue 44: after an error every rank agreed on (rank 0 printed it), the launcher's SIGTERM, sent
// once a faster rank exited, ends this rank with the agreed code and no second message.
TEST(StopSignals, AfterAnAgreedErrorASignalExitsQuietlyWithItsCode) {
  EXPECT_EXIT(
      {
        runtime::install_stop_signal_handlers("test");
        runtime::note_agreed_exit(2);
        std::raise(SIGTERM);
        std::_Exit(0);  // not reached
      },
      ::testing::ExitedWithCode(2), "^$");
}

// Issue 12: a watchdog abort cancels pending communicator work (ncclCommAbort) before the job
// ends: the hooks run, newest first, and one that was removed does not.
TEST(AbortJob, RunsTheRegisteredHooksFirst) {
  EXPECT_EXIT(
      {
        runtime::add_abort_hook([] { std::fputs("first hook\n", stderr); });
        const int gone = runtime::add_abort_hook([] { std::fputs("removed hook\n", stderr); });
        runtime::add_abort_hook([] { std::fputs("second hook\n", stderr); });
        runtime::remove_abort_hook(gone);
        runtime::abort_job(7);
      },
      ::testing::ExitedWithCode(7), "^second hook\nfirst hook\n$");
}

}  // namespace
}  // namespace hpctrain
