// hpctrain trace summary RUN_DIR [--json]: sums up RUN_DIR/trace.json (logging.trace) per step
// and rank; see include/hpctrain/report/trace_summary.hpp.
// hpctrain trace flight RUN_DIR [--json]: merges the flight recorder files
// RUN_DIR/flight/rank-K.json into the hang attribution and a table per channel; see
// include/hpctrain/report/flight_report.hpp.

#include <iostream>

#include "command.hpp"
#include "hpctrain/report/flight_report.hpp"
#include "hpctrain/report/trace_summary.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::cli {
namespace {

struct TraceArgs {
  std::string run_dir;
  bool json = false;
};

int run_trace_summary(CommandContext& ctx, const TraceArgs& opt) {
  if (ctx.runtime.world_rank() != 0) return 0;  // local work
  const auto summary = report::summarize_trace(opt.run_dir);
  std::cout << (opt.json ? summary.dump(1) + "\n"
                         : report::trace_summary_text(summary, opt.run_dir))
            << std::flush;
  return 0;
}

const CommandRegistration trace_command = command<TraceArgs>(
    "trace summary",
    "Per step and rank of a run's trace.json: compute, communication (hidden, exposed), data "
    "wait, stragglers",
    [](CLI::App& app, TraceArgs& opt) {
      app.add_option("run_dir", opt.run_dir, "Run directory holding trace.json")->required();
      app.add_flag("--json", opt.json, "Print the summary as JSON");
    },
    run_trace_summary, runtime::Runtime::Start::kLocal);

int run_trace_flight(CommandContext& ctx, const TraceArgs& opt) {
  if (ctx.runtime.world_rank() != 0) return 0;  // local work
  const auto summary = report::summarize_flight(opt.run_dir);
  std::cout << (opt.json ? summary.dump(1) + "\n" : report::flight_summary_text(summary))
            << std::flush;
  return 0;
}

const CommandRegistration trace_flight_command = command<TraceArgs>(
    "trace flight",
    "Merges a run's flight recorder files (RUN_DIR/flight/rank-K.json): which rank a hang waited "
    "for, where every rank was, a table per channel",
    [](CLI::App& app, TraceArgs& opt) {
      app.add_option("run_dir", opt.run_dir, "Run directory holding flight/")->required();
      app.add_flag("--json", opt.json, "Print the merge as JSON");
    },
    run_trace_flight, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
