// hpctrain bench allreduce: an nccl-tests style bandwidth table for the chosen backend and group,
// with a plain MPI_Allreduce loop on the same buffers timed in the same run as the baseline.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct BenchOptions {
  std::string min_bytes = "64K";
  std::string max_bytes = "64M";
  int factor = 2;
  int warmup = 5;
  int iters = 20;
  int rounds = 3;
  std::string dtype = "float32";
  std::string op = "sum";
  std::string group = "world";
  int tp = 1;
  bool baseline = true;
  bool json = false;
};

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat;
  if (name == "float64") return torch::kDouble;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kHalf;
  if (name == "int32") return torch::kInt;
  if (name == "int64") return torch::kLong;
  throw ConfigError(str("--dtype '", name,
                        "' is unknown: use float32, float64, bfloat16, float16, "
                        "int32 or int64"));
}

using Clock = std::chrono::steady_clock;

// Seconds per operation as the slowest rank saw it (nccl-tests reports the same).
double slowest_rank_seconds(Clock::time_point start, int iters, comm::ControlPlane& world) {
  return world.max(std::chrono::duration<double>(Clock::now() - start).count() / iters);
}

int run_bench_allreduce(CommandContext& ctx, const BenchOptions& opt) {
  Session session = make_session(ctx, opt.tp);
  std::shared_ptr<comm::Communicator> group = opt.group == "world" ? session.comms.world
                                              : opt.group == "dp"  ? session.comms.dp
                                                                   : session.comms.tp;
  const auto dtype = parse_dtype(opt.dtype);
  const auto op = comm::parse_reduce_op(opt.op);
  const auto min_bytes = parse_bytes(opt.min_bytes, "--min-bytes");
  const auto max_bytes = parse_bytes(opt.max_bytes, "--max-bytes");
  if (min_bytes == 0 || max_bytes < min_bytes || opt.factor < 2) {
    throw ConfigError("--min-bytes must be positive and at most --max-bytes, --factor at least 2");
  }
  auto* mpi_group = dynamic_cast<comm::MpiCommunicator*>(group.get());
  const bool baseline = opt.baseline && mpi_group != nullptr;
  const bool raw_supported =
      dtype != torch::kBFloat16 && dtype != torch::kHalf && op != comm::ReduceOp::kAvg;
  const int n = group->size();
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  auto options = torch::TensorOptions().dtype(dtype).device(session.device.device);
  const auto element = static_cast<std::uint64_t>(torch::elementSize(dtype));
  const bool on_gpu = session.device.cuda_index >= 0;
  auto sync = [&] {
    if (on_gpu) torch::cuda::synchronize();
  };

  nlohmann::ordered_json rows = nlohmann::json::array();
  if (ctx.runtime.world_rank() == 0 && !opt.json) {
    std::printf(
        "# hpctrain bench allreduce: backend %s, group %s (%d ranks), %s %s, in place, "
        "best of %d rounds x %d iterations\n",
        group->backend(), group->name().c_str(), n, opt.dtype.c_str(), opt.op.c_str(), opt.rounds,
        opt.iters);
    std::printf("# busbw = algbw x 2(n-1)/n; baseline = plain MPI_Allreduce on the same buffer\n");
    std::printf("%12s %12s %10s %10s %10s %s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
                "busbw(GB/s)", baseline ? "  base(us) base_busbw  ratio" : "");
  }

  for (std::uint64_t bytes = min_bytes; bytes <= max_bytes; bytes *= opt.factor) {
    const auto count = static_cast<int64_t>(std::max<std::uint64_t>(1, bytes / element));
    torch::Tensor buffer = torch::ones({count}, options);
    for (int i = 0; i < opt.warmup; ++i) group->all_reduce(buffer, op);
    double best = 1e30;
    double best_raw = 1e30;
    for (int round = 0; round < opt.rounds; ++round) {
      buffer.fill_(1);
      group->barrier();
      auto start = Clock::now();
      for (int i = 0; i < opt.iters; ++i) group->all_reduce(buffer, op);
      sync();
      best = std::min(best, slowest_rank_seconds(start, opt.iters, *session.control.world));
      if (baseline && raw_supported) {
        buffer.fill_(1);
        mpi_group->barrier();
        start = Clock::now();
        for (int i = 0; i < opt.iters; ++i) mpi_group->plain_mpi_all_reduce(buffer, op);
        best_raw =
            std::min(best_raw, slowest_rank_seconds(start, opt.iters, *session.control.world));
      }
    }
    const double actual_bytes = static_cast<double>(count * element);
    const double algbw = actual_bytes / best / 1e9;
    nlohmann::ordered_json row{{"bytes", count * element},
                               {"count", count},
                               {"dtype", opt.dtype},
                               {"op", opt.op},
                               {"time_us", best * 1e6},
                               {"algbw_gbs", algbw},
                               {"busbw_gbs", algbw * bus_factor}};
    if (baseline && raw_supported) {
      const double raw_busbw = actual_bytes / best_raw / 1e9 * bus_factor;
      row["baseline_time_us"] = best_raw * 1e6;
      row["baseline_busbw_gbs"] = raw_busbw;
      row["ratio"] = best_raw / best;
    }
    if (ctx.runtime.world_rank() == 0 && !opt.json) {
      std::printf("%12lld %12lld %10.1f %10.3f %10.3f", static_cast<long long>(count * element),
                  static_cast<long long>(count), best * 1e6, algbw, algbw * bus_factor);
      if (row.contains("ratio")) {
        std::printf(" %10.1f %10.3f %6.3f", row["baseline_time_us"].get<double>(),
                    row["baseline_busbw_gbs"].get<double>(), row["ratio"].get<double>());
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    rows.push_back(row);
  }
  if (ctx.runtime.world_rank() == 0 && opt.json) {
    nlohmann::ordered_json out{{"benchmark", "allreduce"},
                               {"backend", group->backend()},
                               {"group", group->name()},
                               {"ranks", n},
                               {"world_size", ctx.runtime.world_size()},
                               {"iters", opt.iters},
                               {"rounds", opt.rounds},
                               {"rows", rows}};
    print_json(out);
  }
  return 0;
}

const CommandRegistration bench_allreduce_command = command<BenchOptions>(
    "bench allreduce", "All-reduce bandwidth table (size, time, algbw, busbw) with an MPI baseline",
    [](CLI::App& app, BenchOptions& opt) {
      app.add_option("--min-bytes", opt.min_bytes, "Smallest message (e.g. 64K)");
      app.add_option("--max-bytes", opt.max_bytes, "Largest message (e.g. 64M)");
      app.add_option("--factor", opt.factor, "Size multiplier between rows");
      app.add_option("--warmup", opt.warmup, "Untimed iterations per size");
      app.add_option("--iters", opt.iters, "Timed iterations per round")
          ->check(CLI::PositiveNumber);
      app.add_option("--rounds", opt.rounds, "Rounds per size (best is reported)")
          ->check(CLI::PositiveNumber);
      app.add_option("--dtype", opt.dtype,
                     "float32 | float64 | bfloat16 | float16 | int32 | int64");
      app.add_option("--op", opt.op, "sum | avg | max | min");
      app.add_option("--group", opt.group, "world | dp | tp")
          ->check(CLI::IsMember({"world", "dp", "tp"}));
      app.add_option("--tp", opt.tp, "Tensor-parallel size of the grid")
          ->check(CLI::PositiveNumber);
      app.add_flag("--baseline,!--no-baseline", opt.baseline,
                   "Also time a plain MPI_Allreduce loop on the same buffer (MPI backend)");
      app.add_flag("--json", opt.json, "Print JSON instead of a table");
    },
    run_bench_allreduce);

}  // namespace
}  // namespace hpctrain::cli
