// hpctrain bench data: throughput of the sharded reader (samples/s, MB/s) and the time a training
// loop would wait for data, without and with prefetching. scripts/bench_data.sh runs it next to
// h5py reading the very same batches (--indices-out) from the same file.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "command.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/sampler.hpp"
#include "hpctrain/data/train_loader.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct BenchDataOptions {
  std::string file;
  std::int64_t batch = 64;
  std::int64_t steps = 300;
  std::int64_t warmup = 20;
  int prefetch = 4;
  double compute_ms = 2.0;
  std::uint64_t seed = 0;
  bool shuffle = true;
  std::int64_t seq_len = 128;
  int tp = 1;
  std::string chunk_cache = "auto";
  std::string indices_out;
  bool json = false;
};

using Clock = std::chrono::steady_clock;

struct Phase {
  std::string name;
  int prefetch = -1;  // -1: plain reads, no loop
  double seconds = 0;
  double wait_seconds = 0;
};

// The global batches in order (warm-up, then timed), int64 little-endian, for the h5py side.
void write_indices(const data::TrainSampler& sampler, const BenchDataOptions& opt) {
  std::ofstream out(opt.indices_out, std::ios::binary);
  data::SamplerState state;
  for (std::int64_t s = 0; s < opt.warmup + opt.steps; ++s) {
    auto batch = sampler.next_global_batch(state);
    out.write(reinterpret_cast<const char*>(batch.data()),
              static_cast<std::streamsize>(batch.size() * sizeof(std::int64_t)));
  }
  if (!out) throw Error(str("cannot write --indices-out file '", opt.indices_out, "'"));
}

// This rank's times: plain reads of the timed steps, then training loops without and with
// prefetching, each from `timed_start`.
std::vector<Phase> time_phases(data::Dataset& dataset, const data::TrainSampler& sampler,
                               const data::SamplerState& timed_start,
                               const runtime::ProcessGrid& grid, comm::ControlPlane& world,
                               const BenchDataOptions& opt) {
  const int dp = grid.dp_size();
  std::vector<Phase> phases;
  world.barrier();
  {
    Phase phase{"reader (no prefetch, no compute)", -1};
    auto start = Clock::now();
    data::SamplerState s = timed_start;
    for (std::int64_t i = 0; i < opt.steps; ++i) {
      dataset.read(
          data::TrainSampler::rank_slice(sampler.next_global_batch(s), grid.dp_rank(), dp));
    }
    phase.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    phase.wait_seconds = phase.seconds;
    phases.push_back(phase);
  }
  const auto compute = std::chrono::duration<double, std::milli>(opt.compute_ms);
  std::vector<int> depths{0};
  if (opt.prefetch > 0) depths.push_back(opt.prefetch);
  for (int depth : depths) {
    world.barrier();
    Phase phase{str("loop: prefetch ", depth, ", compute ", opt.compute_ms, " ms/step"), depth};
    auto start = Clock::now();
    data::TrainLoader loader(dataset, sampler, timed_start, grid.dp_rank(), dp, depth,
                             timed_start.global_step + opt.steps);
    data::Batch batch;
    while (loader.next(batch)) {
      // Stands in for forward/backward: sleeping leaves the core to the reader thread, as a
      // step does while it waits in its gradient all-reduce.
      std::this_thread::sleep_for(compute);
    }
    phase.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    phase.wait_seconds = loader.wait_seconds();
    phases.push_back(phase);
  }
  return phases;
}

// The human-readable table of `j` (the JSON report).
void print_bench_data_table(const nlohmann::ordered_json& j, const data::DatasetInfo& info,
                            const BenchDataOptions& opt) {
  std::string chunks = "none";
  if (!info.chunk_shape.empty()) {
    chunks.clear();
    for (auto d : info.chunk_shape) chunks += (chunks.empty() ? "" : "x") + std::to_string(d);
  }
  std::string shape;
  for (auto d : info.sample_shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  const int world_size = j["world_size"].get<int>();
  const int dp = j["dp"].get<int>();
  const int tp = j["tp"].get<int>();
  const std::int64_t global_batch = j["global_batch"].get<std::int64_t>();
  std::printf("# hpctrain bench data: %s\n", opt.file.c_str());
  std::printf("# opened and validated %zu file(s) in %.3f s (slowest of %d ranks)\n",
              info.files.size(), j["open_seconds"].get<double>(), world_size);
  std::printf("# %lld samples of %s %s (%lld B), chunks %s, chunk cache %s\n",
              static_cast<long long>(info.num_samples), shape.c_str(), info.input_dtype.c_str(),
              static_cast<long long>(info.sample_bytes), chunks.c_str(),
              format_bytes(static_cast<double>(info.chunk_cache_bytes)).c_str());
  std::printf(
      "# %d ranks (dp=%d x tp=%d), batch %lld per rank (global %lld), %lld steps after "
      "%lld warm-up, %s\n",
      world_size, dp, tp, static_cast<long long>(opt.batch), static_cast<long long>(global_batch),
      static_cast<long long>(opt.steps), static_cast<long long>(opt.warmup),
      opt.shuffle ? str("shuffled (seed ", opt.seed, ")").c_str() : "sequential");
  std::printf(
      "# samples/s and MB/s of the whole job (slowest rank); wait = time the loop spent "
      "in next(), per step, slowest rank\n");
  std::printf("%-44s %12s %10s %14s\n", "phase", "samples/s", "MB/s", "wait/step(ms)");
  for (const auto& row : j["rows"]) {
    std::printf("%-44s %12.0f %10.1f %14.3f\n", row["phase"].get<std::string>().c_str(),
                row["samples_per_s"].get<double>(), row["mb_per_s"].get<double>(),
                row["wait_ms_per_step"].get<double>());
  }
  std::fflush(stdout);
}

int run_bench_data(CommandContext& ctx, const BenchDataOptions& opt) {
  Session session = make_session(ctx, opt.tp);
  const auto& grid = *session.grid;
  comm::ControlPlane& world = *session.control.world;
  const int dp = grid.dp_size();
  const std::int64_t global_batch = opt.batch * dp;

  data::DatasetExpectation expect;
  expect.min_samples = global_batch;
  expect.seq_len = opt.seq_len;
  expect.config_key = "--file";
  data::ReadOptions read_options;
  if (opt.chunk_cache != "auto") {
    read_options.chunk_cache_bytes = parse_bytes(opt.chunk_cache, "--chunk-cache");
  }
  // Every rank opens and validates, as training does: a list, glob or directory of files is
  // validated by the world's ranks together (each its share of the files), the time is the
  // slowest rank's.
  session.control.world->barrier();
  const auto open_start = Clock::now();
  auto dataset = data::Dataset::open(opt.file, expect, read_options, &world);
  const double open_seconds =
      world.max(std::chrono::duration<double>(Clock::now() - open_start).count());
  const data::DatasetInfo& info = dataset->info();
  data::TrainSampler sampler(info.num_samples, global_batch, opt.seed, opt.shuffle);
  if (ctx.runtime.world_rank() == 0 && !opt.indices_out.empty()) write_indices(sampler, opt);

  // Warm-up: the same first steps the h5py side skips.
  data::SamplerState state;
  for (std::int64_t s = 0; s < opt.warmup; ++s) {
    dataset->read(
        data::TrainSampler::rank_slice(sampler.next_global_batch(state), grid.dp_rank(), dp));
  }
  std::vector<Phase> phases = time_phases(*dataset, sampler, state, grid, world, opt);

  const double samples = static_cast<double>(opt.steps * global_batch);
  const double bytes = samples * static_cast<double>(info.sample_bytes);
  nlohmann::ordered_json rows = nlohmann::json::array();
  for (Phase& phase : phases) {
    phase.seconds = world.max(phase.seconds);
    phase.wait_seconds = world.max(phase.wait_seconds);
    rows.push_back(
        {{"phase", phase.name},
         {"prefetch", phase.prefetch},
         {"seconds", phase.seconds},
         {"samples_per_s", samples / phase.seconds},
         {"mb_per_s", bytes / phase.seconds / 1e6},
         {"wait_ms_per_step", phase.wait_seconds / static_cast<double>(opt.steps) * 1e3}});
  }
  if (ctx.runtime.world_rank() != 0) return 0;
  nlohmann::ordered_json j{{"benchmark", "data"},
                           {"file", opt.file},
                           {"files", info.files.size()},
                           {"open_seconds", open_seconds},
                           {"kind", task_name(info.kind)},
                           {"num_samples", info.num_samples},
                           {"sample_shape", info.sample_shape},
                           {"dtype", info.input_dtype},
                           {"sample_bytes", info.sample_bytes},
                           {"chunk_shape", info.chunk_shape},
                           {"chunk_cache_bytes", info.chunk_cache_bytes},
                           {"world_size", ctx.runtime.world_size()},
                           {"dp", dp},
                           {"tp", grid.tp_size()},
                           {"batch_per_rank", opt.batch},
                           {"global_batch", global_batch},
                           {"steps", opt.steps},
                           {"warmup", opt.warmup},
                           {"shuffle", opt.shuffle},
                           {"seed", opt.seed},
                           {"compute_ms", opt.compute_ms},
                           {"rows", rows}};
  if (opt.json) {
    print_json(j);
    return 0;
  }
  print_bench_data_table(j, info, opt);
  return 0;
}

const CommandRegistration bench_data_command = command<BenchDataOptions>(
    "bench data", "Sharded reader throughput (samples/s, MB/s) and data wait of a training loop",
    [](CLI::App& app, BenchDataOptions& opt) {
      app.add_option("--file", opt.file,
                     "HDF5 dataset file, or a list, glob or directory of them (as data.train)")
          ->required();
      app.add_option("--batch", opt.batch, "Samples per data-parallel rank per step")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--steps", opt.steps, "Timed steps per phase")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--warmup", opt.warmup, "Untimed steps first")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      app.add_option("--prefetch", opt.prefetch, "Batches read ahead in the prefetch phase")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      app.add_option("--compute-ms", opt.compute_ms, "Simulated compute per step")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      app.add_option("--seed", opt.seed, "Sampler seed")->capture_default_str();
      app.add_flag("--shuffle,!--no-shuffle", opt.shuffle, "Shuffled (default) or sequential");
      app.add_option("--seq-len", opt.seq_len, "Window length for token files")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--tp", opt.tp, "Tensor-parallel size of the grid")
          ->check(CLI::PositiveNumber);
      app.add_option("--chunk-cache", opt.chunk_cache, "Chunk cache: auto or a size (64M)")
          ->capture_default_str();
      app.add_option("--indices-out", opt.indices_out,
                     "Write the global batches read (int64 LE, warm-up then timed) for h5py");
      app.add_flag("--json", opt.json, "Print JSON instead of a table");
    },
    run_bench_data);

}  // namespace
}  // namespace hpctrain::cli
