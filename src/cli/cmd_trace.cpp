// hpctrain trace summary RUN_DIR [--json]: sums up RUN_DIR/trace.json (logging.trace) per step
// and rank; see include/hpctrain/train/trace_summary.hpp.
// hpctrain trace flight RUN_DIR [--json]: merges the flight recorder files
// RUN_DIR/flight/rank-K.json into the hang attribution and a table per channel; see
// include/hpctrain/train/flight_report.hpp.

#include <iostream>

#include "command.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/train/flight_report.hpp"
#include "hpctrain/train/trace_summary.hpp"

namespace hpctrain::cli {
namespace {

struct TraceArgs {
  std::string run_dir;
  bool json = false;
};
TraceArgs g_trace;
TraceArgs g_flight;

int run_trace_summary(CommandContext& ctx) {
  if (ctx.runtime.world_rank() != 0) return 0;  // local work
  const auto summary = train::summarize_trace(g_trace.run_dir);
  std::cout << (g_trace.json ? summary.dump(1) + "\n"
                             : train::trace_summary_text(summary, g_trace.run_dir))
            << std::flush;
  return 0;
}

CommandRegistration reg(
    "trace summary",
    "Per step and rank of a run's trace.json: compute, communication (hidden, exposed), data "
    "wait, stragglers",
    [](CLI::App& app) {
      app.add_option("run_dir", g_trace.run_dir, "Run directory holding trace.json")->required();
      app.add_flag("--json", g_trace.json, "Print the summary as JSON");
    },
    run_trace_summary, runtime::Runtime::Start::kLocal);

int run_trace_flight(CommandContext& ctx) {
  if (ctx.runtime.world_rank() != 0) return 0;  // local work
  const auto summary = train::summarize_flight(g_flight.run_dir);
  std::cout << (g_flight.json ? summary.dump(1) + "\n" : train::flight_summary_text(summary))
            << std::flush;
  return 0;
}

CommandRegistration flight_reg(
    "trace flight",
    "Merges a run's flight recorder files (RUN_DIR/flight/rank-K.json): which rank a hang waited "
    "for, where every rank was, a table per channel",
    [](CLI::App& app) {
      app.add_option("run_dir", g_flight.run_dir, "Run directory holding flight/")->required();
      app.add_flag("--json", g_flight.json, "Print the merge as JSON");
    },
    run_trace_flight, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
