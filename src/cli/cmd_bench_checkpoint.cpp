// hpctrain bench checkpoint: save and load time and bandwidth of checkpoints of a synthetic model
// of a given size, and how long save() blocks the training loop when writing in the background.
// scripts/bench_checkpoint.sh runs it next to `dd ... conv=fsync` writing the same bytes to the
// same filesystem in the same run.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct BenchCheckpointOptions {
  std::vector<std::string> params{"10M"};
  bool background = false;
  double overlap_ms = 0;
  int tp = 0;  // 0: the world size
  std::string dir = "bench-checkpoint-run";
  int repeat = 3;
  double tensor_mb = 64;
  bool keep_files = false;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// "10M" -> 10,000,000 parameters (decimal K, M, G).
std::int64_t parse_count(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string suffix = text.substr(used);
  const double scale = suffix.empty()                   ? 1
                       : suffix == "K" || suffix == "k" ? 1e3
                       : suffix == "M" || suffix == "m" ? 1e6
                       : suffix == "G" || suffix == "g" ? 1e9
                                                        : -1;
  if (used == 0 || scale < 0 || value <= 0) {
    throw ConfigError(str("--params '", text, "': expected a positive count like 10M or 250K"));
  }
  return static_cast<std::int64_t>(std::llround(value * scale));
}

// A model of `params` float32 parameters: tensors of [rows, 1024] of at most --tensor-mb each,
// split along dim 0 over the tp ranks. The values are touched here, outside any timing.
std::vector<checkpoint::TensorRecord> make_model(std::int64_t params, int tp_rank, int tp_size,
                                                 const BenchCheckpointOptions& opt) {
  constexpr std::int64_t kCols = 1024;
  const std::int64_t max_rows =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(opt.tensor_mb * 1024 * 1024 / 4) / kCols);
  std::int64_t rows_left = (params + kCols - 1) / kCols;
  std::vector<checkpoint::TensorRecord> out;
  for (int i = 0; rows_left > 0; ++i) {
    const std::int64_t rows = std::min(rows_left, max_rows);
    rows_left -= rows;
    const std::int64_t local_rows = (rows + tp_size - 1) / tp_size;
    torch::Tensor local = torch::empty({local_rows, kCols}, torch::kFloat);
    local.fill_(static_cast<float>(i + tp_rank) * 0.001f);
    // Rows past the logical extent are padding: zero, never saved, zeroed on load.
    const std::int64_t valid = std::clamp<std::int64_t>(rows - tp_rank * local_rows, 0, local_rows);
    local.narrow(0, valid, local_rows - valid).zero_();
    out.push_back({str("model/layers.", i, ".weight"), local, {{rows, kCols}, 0}});
  }
  return out;
}

struct Row {
  std::int64_t params = 0;
  std::int64_t bytes = 0;
  double save_s = 0;  // median, save() to committed
  double blocked_s =
      0;                // median time training was blocked (save() + wait_for_copy()), slowest rank
  double copy_s = 0;    // median part of it spent copying the live tensors, slowest rank
  double load_s = 0;    // median
  double verify_s = 0;  // resolve(): rank 0 reads and checksums every file
};

// Stands in for the next training step's forward and backward: `ms` milliseconds of matrix
// products on this thread (they compete for the cores with the background copy, as a real step
// would). Local.
void simulate_compute(double ms) {
  if (ms <= 0) return;
  torch::NoGradGuard no_grad;
  const torch::Tensor a = torch::rand({256, 256});
  torch::Tensor b = torch::rand({256, 256});
  const auto start = Clock::now();
  while (since(start) * 1e3 < ms) b = torch::mm(a, b).div_(256);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Row bench_one(std::int64_t params, const runtime::ProcessGrid& grid, comm::ControlPlane& world,
              const BenchCheckpointOptions& opt) {
  Row row;
  row.params = params;
  const std::string run_dir = str(opt.dir, "/params_", params);
  checkpoint::ManagerOptions options;
  options.background = opt.background;
  options.keep = 2;
  checkpoint::CheckpointManager manager(run_dir, grid, options);
  // The live model the "training loop" holds; save() copies it into buffers the manager reuses.
  auto live = make_model(params, grid.tp_rank(), grid.tp_size(), opt);
  std::vector<double> save, blocked, copy, load, verify;
  for (int i = 0; i <= opt.repeat; ++i) {  // i = 0: warm-up (allocates the copy buffers)
    checkpoint::SaveContent content;
    content.step = i + 1;
    content.tensors = live;
    content.copy = true;
    content.defer_copy = true;  // with --background: copied on the writer thread
    world.barrier();
    auto start = Clock::now();
    manager.save(std::move(content));
    double b = since(start);
    // The next step's forward and backward (--overlap-ms) run while the copy proceeds; its
    // optimizer update must wait for the copy: that wait blocks training too.
    simulate_compute(opt.overlap_ms);
    b += manager.wait_for_copy();
    manager.wait();
    if (i == 0) continue;
    blocked.push_back(world.max(b));
    copy.push_back(world.max(manager.last_copy_seconds()));
    // From save() to committed (`latest` replaced), as world rank 0 measured it; retention's
    // deletions, which wait() also waits for, come after.
    save.push_back(manager.last_save_seconds());
  }
  row.bytes = manager.last_save_bytes();
  auto targets = make_model(params, grid.tp_rank(), grid.tp_size(), opt);
  for (int i = 0; i < opt.repeat; ++i) {
    world.barrier();
    auto start = Clock::now();
    const auto dir = manager.resolve("auto");
    verify.push_back(world.max(since(start)));
    if (!dir) throw CheckpointError(str("bench: no checkpoint to load in ", run_dir));
    world.barrier();
    start = Clock::now();
    manager.load(*dir, targets);
    load.push_back(world.max(since(start)));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!torch::equal(targets[i].local, live[i].local)) {
      throw CheckpointError(str("bench: loaded ", targets[i].name, " differs from what was saved"));
    }
  }
  row.save_s = median(save);
  row.blocked_s = median(blocked);
  row.copy_s = median(copy);
  row.load_s = median(load);
  row.verify_s = median(verify);
  return row;
}

int run_bench_checkpoint(CommandContext& ctx, const BenchCheckpointOptions& opt) {
  const int tp = opt.tp > 0 ? opt.tp : ctx.runtime.world_size();
  Session session = make_session(ctx, tp);
  const auto& grid = *session.grid;
  comm::ControlPlane& world = *session.control.world;
  std::vector<std::int64_t> counts;
  for (const auto& p : opt.params) counts.push_back(parse_count(p));
  std::vector<Row> rows;
  for (std::int64_t params : counts) rows.push_back(bench_one(params, grid, world, opt));
  if (ctx.runtime.world_rank() == 0 && !opt.keep_files) {
    std::error_code ec;
    std::filesystem::remove_all(opt.dir, ec);
  }
  if (ctx.runtime.world_rank() != 0) return 0;
  nlohmann::ordered_json j{{"benchmark", "checkpoint"},
                           {"dir", opt.dir},
                           {"world_size", ctx.runtime.world_size()},
                           {"dp", grid.dp_size()},
                           {"tp", grid.tp_size()},
                           {"background", opt.background},
                           {"overlap_ms", opt.background ? opt.overlap_ms : 0.0},
                           {"repeat", opt.repeat},
                           {"rows", nlohmann::json::array()}};
  for (const Row& r : rows) {
    j["rows"].push_back(
        {{"params", r.params},
         {"bytes", r.bytes},
         {"save_s", r.save_s},
         {"save_mb_per_s", static_cast<double>(r.bytes) / r.save_s / 1e6},
         {"blocked_s", r.blocked_s},
         {"blocked_fraction", r.blocked_s / r.save_s},
         {"copy_s", r.copy_s},
         {"blocked_without_copy_fraction", std::max(0.0, r.blocked_s - r.copy_s) / r.save_s},
         {"load_s", r.load_s},
         {"load_mb_per_s", static_cast<double>(r.bytes) / r.load_s / 1e6},
         {"verify_s", r.verify_s}});
  }
  if (opt.json) {
    print_json(j);
    return 0;
  }
  std::printf(
      "# hpctrain bench checkpoint: %d ranks (dp=%d x tp=%d), %s writing, median of %d, "
      "in %s\n",
      ctx.runtime.world_size(), grid.dp_size(), grid.tp_size(),
      opt.background ? "background" : "synchronous", opt.repeat, opt.dir.c_str());
  std::printf(
      "# save = save() to committed (fsynced, checksummed, renamed); blocked = time "
      "save() held the caller plus the wait for the copy after %.0f ms of compute (background: "
      "the copy runs on the writer thread); load reads from the page cache\n",
      opt.background ? opt.overlap_ms : 0.0);
  std::printf("%12s %10s %9s %10s %10s %9s %9s %10s %9s\n", "params", "MB", "save(s)", "save MB/s",
              "blocked(s)", "blocked%", "load(s)", "load MB/s", "verify(s)");
  for (const auto& r : j["rows"]) {
    std::printf("%12lld %10.1f %9.3f %10.1f %10.4f %8.1f%% %9.3f %10.1f %9.3f\n",
                static_cast<long long>(r["params"].get<std::int64_t>()),
                r["bytes"].get<double>() / 1e6, r["save_s"].get<double>(),
                r["save_mb_per_s"].get<double>(), r["blocked_s"].get<double>(),
                100 * r["blocked_fraction"].get<double>(), r["load_s"].get<double>(),
                r["load_mb_per_s"].get<double>(), r["verify_s"].get<double>());
  }
  std::fflush(stdout);
  return 0;
}

const CommandRegistration bench_checkpoint_command = command<BenchCheckpointOptions>(
    "bench checkpoint",
    "Checkpoint save/load time and MB/s for a synthetic model; blocking time of background saves",
    [](CLI::App& app, BenchCheckpointOptions& opt) {
      app.add_option("--params", opt.params, "Model sizes in parameters (10M, 100M; repeatable)")
          ->capture_default_str();
      app.add_flag("--background,!--sync", opt.background,
                   "Write on the background thread (default: synchronous)");
      app.add_option("--overlap-ms", opt.overlap_ms,
                     "With --background: milliseconds of compute (the next step's forward and "
                     "backward) between save() and the wait for the copy (default 0)")
          ->check(CLI::NonNegativeNumber);
      app.add_option("--tp", opt.tp, "Tensor-parallel size (default: every rank)")
          ->check(CLI::PositiveNumber);
      app.add_option("--dir", opt.dir, "Run directory to write checkpoints into (removed after)")
          ->capture_default_str();
      app.add_option("--repeat", opt.repeat, "Timed saves and loads per size (after 1 warm-up)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--tensor-mb", opt.tensor_mb, "Largest tensor of the synthetic model (MiB)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_flag("--keep-files", opt.keep_files, "Leave the checkpoints in --dir");
      app.add_flag("--json", opt.json, "Print JSON instead of a table");
    },
    run_bench_checkpoint);

}  // namespace
}  // namespace hpctrain::cli
