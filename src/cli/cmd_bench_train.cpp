// hpctrain bench train: a training run from a config, as `hpctrain train` does it (the same
// Trainer), with no evaluation or checkpoints, reporting steady-state throughput (tokens or
// samples per second and achieved FLOP/s, after warm-up steps) and the time spent in the
// model's tensor-parallel collectives per step. scripts/bench_gpt.sh runs it beside a PyTorch
// reference.

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.hpp"
#include "hpctrain/comm/communicator.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/parallel/tensor_parallel_ops.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct BenchTrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::int64_t warmup = 2;
  bool json = false;
};

// The train records of metrics.jsonl (one per step: the command sets logging.every_steps = 1).
std::vector<nlohmann::json> train_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(str("cannot read ", path, " (written by this run's rank 0)"));
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.value("type", "") == "train") out.push_back(std::move(j));
  }
  return out;
}

// The human-readable table of `j` (the JSON report) of a run on `grid`.
void print_bench_train_table(const nlohmann::ordered_json& j, const std::string& grid) {
  const int world_size = j["world_size"].get<int>();
  const std::int64_t steps = j["steps"].get<std::int64_t>();
  const std::int64_t warmup = j["warmup_steps"].get<std::int64_t>();
  const double step_time = j["step_time_s"].get<double>();
  const double tp_comm = j["tp_comm_s_per_step"].get<double>();
  std::cout << "# hpctrain bench train: " << j["config"].get<std::string>() << ", "
            << j["model"].get<std::string>() << " (" << j["parameters"].get<std::int64_t>()
            << " parameters)\n"
            << "# " << world_size << " ranks (" << grid << "), " << j["threads_per_rank"].get<int>()
            << " thread(s) per rank, global batch " << number_text(j["global_batch"].get<double>())
            << ", " << steps << " steps (" << warmup << " warm-up steps not timed)\n";
  Table t;
  t.row("step time", step_time, "s");
  t.row("tokens/s", std::round(j["tokens_per_s"].get<double>()), "");
  t.row("samples/s", j["samples_per_s"].get<double>(), "");
  t.row("achieved FLOP/s", j["flops_per_s"].get<double>(), "",
        str("(", number_text(j["flops_per_s"].get<double>() / world_size), " per rank)"));
  t.row("tp comm / step", tp_comm, "s",
        str("(", number_text(100.0 * tp_comm / step_time), "% of a step; slowest rank ",
            number_text(j["tp_comm_s_per_step_max_rank"].get<double>()), " s; ",
            number_text(j["tp_collectives_per_step"].get<double>()), " collectives)"));
  if (j.contains("pipeline")) {
    t.row("pipeline bubble", 100 * j["pipeline"]["bubble_fraction"].get<double>(), "%",
          str("(measured, every step; the formula says ",
              number_text(100 * j["pipeline"]["predicted_bubble_fraction"].get<double>()), "%)"));
  }
  t.row("first loss", j["first_loss"].get<double>(), "");
  t.row("last loss", j["last_loss"].get<double>(), "");
  t.print(std::cout);
  std::cout << std::flush;
}

int run_bench_train(CommandContext& ctx, const BenchTrainOptions& opt) {
  if (opt.warmup < 0) throw ConfigError("--warmup-steps must be >= 0");
  // A benchmark measures steps: nothing else runs inside the loop, and every step is logged so
  // that the warm-up steps can be left out.
  std::vector<std::string> overrides = opt.overrides;
  for (const char* fixed :
       {"logging.every_steps=1", "logging.progress=off", "eval.every_steps=0", "eval.at_end=false",
        "checkpoint.every_steps=0", "checkpoint.every_minutes=0", "checkpoint.at_end=false"}) {
    overrides.emplace_back(fixed);
  }
  RunConfig run = load_run_config(ctx, opt.config, overrides);
  Config& config = run.config;
  Session session = make_session(ctx, run.parallel.tp, run.parallel.pp);
  const std::string default_dir = "runs/bench-" + std::filesystem::path(opt.config).stem().string();
  train::Trainer trainer(config, default_dir, environment(ctx, session), "none");
  const std::string run_dir = trainer.config().run.dir;
  // metrics.jsonl is appended to (resumed runs continue it): start this run's afresh. Only rank
  // 0 writes it, and only from run() on.
  if (ctx.runtime.world_rank() == 0) std::filesystem::remove(run_dir + "/metrics.jsonl");
  // Construction ran one forward pass to check the data against the model: count the steps only.
  parallel::reset_tensor_parallel_comm_seconds();
  const std::int64_t flight_before = runtime::FlightRecorder::recorded();
  const train::TrainOutcome outcome = trainer.run();
  const std::int64_t flight_ops = runtime::FlightRecorder::recorded() - flight_before;
  std::vector<double> comm{parallel::tensor_parallel_comm_seconds(),
                           static_cast<double>(parallel::tensor_parallel_comm_calls())};
  auto& world = *session.control.world;
  const double slowest = world.max(comm[0]);
  world.reduce(comm, comm::ReduceOp::kSum);
  world.barrier();
  if (ctx.runtime.world_rank() != 0) return outcome.exit_code;

  nlohmann::json ledger;
  std::ifstream(run_dir + "/ledger.json") >> ledger;
  const auto records = train_records(run_dir + "/metrics.jsonl");
  const auto steps = static_cast<std::int64_t>(records.size());
  if (steps <= opt.warmup) {
    throw ConfigError(str("bench train ran ", steps, " steps, not more than --warmup-steps = ",
                          opt.warmup, ": raise run.max_steps"));
  }
  double seconds = 0;
  for (std::int64_t i = opt.warmup; i < steps; ++i)
    seconds += records[i]["step_time"].get<double>();
  const double measured = static_cast<double>(steps - opt.warmup);
  const double step_time = seconds / measured;
  const double global_batch =
      ledger["samples_trained"].get<double>() / ledger["steps"].get<double>();
  const double tokens_per_sample = ledger["model"]["tokens_per_sample"].get<double>();
  const double flops_per_sample = ledger["flops"]["train_per_sample"].get<double>();
  const int world_size = ctx.runtime.world_size();
  const double* c = comm.data();
  nlohmann::ordered_json j{
      {"benchmark", "train"},
      {"config", opt.config},
      {"model", ledger["model"]["name"]},
      {"parameters", ledger["model"]["parameters"]},
      {"world_size", world_size},
      {"dp", session.grid->dp_size()},
      {"pp", session.grid->pp_size()},
      {"tp", session.grid->tp_size()},
      {"threads_per_rank", session.device.threads},
      {"device", session.device.device},
      {"global_batch", global_batch},
      {"tokens_per_sample", tokens_per_sample},
      {"steps", steps},
      {"warmup_steps", opt.warmup},
      {"step_time_s", step_time},
      {"samples_per_s", global_batch / step_time},
      {"tokens_per_s", global_batch * tokens_per_sample / step_time},
      {"train_flops_per_sample", flops_per_sample},
      {"flops_per_s", global_batch * flops_per_sample / step_time},
      // Mean over ranks of each rank's seconds in tp collectives, per step (every step counted).
      {"tp_comm_s_per_step", c[0] / world_size / static_cast<double>(steps)},
      {"tp_comm_s_per_step_max_rank", slowest / static_cast<double>(steps)},
      {"tp_collectives_per_step", c[1] / world_size / static_cast<double>(steps)},
      // Operations rank 0's flight recorder recorded per step (0 with logging.flight_records 0).
      {"flight_records", runtime::FlightRecorder::capacity()},
      {"flight_ops_per_step", static_cast<double>(flight_ops) / static_cast<double>(steps)},
      {"first_loss", records.front()["loss"]},
      {"last_loss", records.back()["loss"]},
      {"run_dir", run_dir}};
  if (ledger.contains("pipeline")) {  // every step's, warm-up included
    const auto& pl = ledger["pipeline"];
    j["pipeline"] = {{"schedule", pl["schedule"]},
                     {"virtual_stages", pl["virtual_stages"]},
                     {"micro_batches", pl["micro_batches"]},
                     {"bubble_fraction", pl["bubble_fraction"]},
                     {"bubble_fraction_per_rank", pl["bubble_fraction_per_rank"]},
                     {"predicted_bubble_fraction", pl["predicted_bubble_fraction"]}};
  }
  if (opt.json) {
    print_json(j, /*pretty=*/false);
    return outcome.exit_code;
  }
  print_bench_train_table(j, session.grid->describe());
  return outcome.exit_code;
}

const CommandRegistration bench_train_command = command<BenchTrainOptions>(
    "bench train",
    "Steady-state training throughput (tokens/s, FLOP/s) and tensor-parallel communication time "
    "per step of a config",
    [](CLI::App& app, BenchTrainOptions& opt) {
      app.add_option("-c,--config", opt.config, "Run configuration (YAML)")
          ->required()
          ->check(CLI::ExistingFile);
      app.add_option("--set", opt.overrides,
                     "Override a config key (repeatable), e.g. --set run.max_steps=12");
      app.add_option("--warmup-steps", opt.warmup, "Steps left out of the timing (default 2)");
      app.add_flag("--json", opt.json, "Print one JSON object instead of the table");
    },
    run_bench_train);

}  // namespace
}  // namespace hpctrain::cli
