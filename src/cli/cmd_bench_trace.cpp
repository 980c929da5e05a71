// hpctrain bench trace: what one recording point of logging.trace costs, with the window closed
// (tracing off: the check every phase of every step pays) and open (a slice recorded), so the
// overhead per step is slices per step x these costs (docs/BENCHMARKS.md).

#include <chrono>
#include <cstdio>

#include "command.hpp"
#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/trace.hpp"

namespace hpctrain::cli {
namespace {

struct BenchTraceArgs {
  long long iterations = 2000000;
};

// Nanoseconds per scope over `n` scopes.
double time_scopes(long long n) {
  const auto start = std::chrono::steady_clock::now();
  for (long long i = 0; i < n; ++i) {
    runtime::trace::Scope scope(0, "bench", i);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         static_cast<double>(n);
}

// Nanoseconds per operation followed as the communicators follow one (CollectiveScope: the
// channel's numbers, the flight record, the watchdog slot), over `n` operations.
double time_operations(long long n) {
  static runtime::Channel channel("bench", "", {0});
  const auto start = std::chrono::steady_clock::now();
  for (long long i = 0; i < n; ++i) {
    runtime::CollectiveScope op(&channel, "all_reduce", "bench", 4096, "float32");
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
             .count() /
         static_cast<double>(n);
}

int run_bench_trace(CommandContext& ctx, const BenchTraceArgs& opt) {
  if (ctx.runtime.world_rank() != 0) return 0;
  const long long n = opt.iterations;
  const double off = time_scopes(n);
  runtime::trace::open();
  const double on = time_scopes(n / 10);  // the window keeps every slice: fewer of them
  const auto kept = runtime::trace::close().size();
  std::printf("trace recording point, window closed: %.2f ns per scope (%lld scopes)\n", off, n);
  std::printf("trace recording point, window open:   %.1f ns per slice (%zu slices recorded)\n", on,
              kept);
  // The flight recorder: on (its default ring) against off (numbering and watchdog only).
  const std::size_t records = runtime::FlightRecorder::capacity();
  const long long ops = n / 10;
  time_operations(ops / 10);  // warm the ring's pages
  const double flight_on = time_operations(ops);
  runtime::FlightRecorder::configure(0);
  const double flight_off = time_operations(ops);
  runtime::FlightRecorder::configure(records);
  std::printf("collective followed, flight recorder on (%zu records): %.1f ns per operation\n",
              records, flight_on);
  std::printf("collective followed, flight recorder off:             %.1f ns per operation\n",
              flight_off);
  return 0;
}

const CommandRegistration bench_trace_command = command<BenchTraceArgs>(
    "bench trace", "Cost of one logging.trace recording point, tracing off and on",
    [](CLI::App& app, BenchTraceArgs& opt) {
      app.add_option("--iterations", opt.iterations, "Scopes timed with tracing off")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
    },
    run_bench_trace);

}  // namespace
}  // namespace hpctrain::cli
