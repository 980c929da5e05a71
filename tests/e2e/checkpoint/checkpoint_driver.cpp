// Test driver for the checkpoint end-to-end tests.
//   checkpoint_driver loop RUN_DIR [--pid-dir DIR] [--tp N]  (under mpirun) check what a restart
//       finds (as `check` does), resume from it, then save steps back to back (background
//       writing) until killed
//   checkpoint_driver local RUN_DIR [--kills N] [--seed S]    (one process, no MPI) the same on
//       one rank with save_local, in forked children: one killed at each commit phase (test hook
//       HPCTRAIN_TEST_CHECKPOINT_CRASH), then N killed with SIGKILL after a random delay; after
//       each death the parent checks what a restart finds
//   checkpoint_driver check RUN_DIR                           (one process, no MPI) what a restart
//       after a crash finds: every step_<N> directory and the one `latest` names verify, and
//       the choice of resume = auto is a committed step_<N> holding exactly its step's values
//   checkpoint_driver export RUN_DIR EXPECTED_JSON [--tp N]   (under mpirun) save one checkpoint
//       and write the logical values it holds, to compare with scripts/load_checkpoint.py
// Lines "ok step_<N>" / "none" report each check; "FAIL: ..." a failed one. Exit: 0, 1 failed, 2
// usage.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace ckpt = hpctrain::checkpoint;
namespace fs = std::filesystem;

namespace {

struct Spec {
  std::string name;
  std::vector<std::int64_t> shape;
  int split_dim;
  torch::ScalarType dtype;
};

// A small model with every dtype and an uneven split (padding at tp = 4), plus (big) one 1 MiB
// tensor so that a save spends its time writing.
std::vector<Spec> specs(bool big) {
  std::vector<Spec> s{
      {"model/emb.weight", {10, 6}, 0, torch::kFloat},
      {"model/fc1.weight", {7, 9}, 1, torch::kFloat},
      {"model/fc1.bias", {7}, -1, torch::kFloat},
      {"model/head.weight", {5, 4}, 0, torch::kBFloat16},
      {"model/norm.weight", {6}, -1, torch::kHalf},
      {"optimizer/exp_avg/emb.weight", {10, 6}, 0, torch::kFloat},
      {"optimizer/exp_avg_sq/emb.weight", {10, 6}, 0, torch::kFloat},
      {"optimizer/step", {}, -1, torch::kLong},
  };
  if (big) s.push_back({"model/big.weight", {256, 1024}, 0, torch::kFloat});
  return s;
}

torch::Tensor logical_value(const Spec& spec, double salt) {
  std::int64_t numel = 1;
  for (auto d : spec.shape) numel *= d;
  return (torch::arange(numel, torch::kDouble) * 0.25 + salt).view(spec.shape).to(spec.dtype);
}

// The records of tp rank `tp_rank` of `tp_size` holding the values of step `salt`.
std::vector<ckpt::TensorRecord> records(const std::vector<Spec>& all, int tp_rank, int tp_size,
                                        double salt) {
  std::vector<ckpt::TensorRecord> out;
  for (const Spec& s : all) {
    out.push_back({s.name,
                   hpctrain::parallel::shard_of(logical_value(s, salt), {s.shape, s.split_dim},
                                                tp_rank, tp_size),
                   {s.shape, s.split_dim}});
  }
  return out;
}

ckpt::SaveContent content_of(std::int64_t step, int tp_rank, int tp_size) {
  ckpt::SaveContent c;
  c.step = step;
  c.epoch = step / 100;
  c.consumed_samples = step * 8;
  c.trainer_state = {{"step", step}};
  c.config_text = "driver: loop\n";
  c.metric = static_cast<double>((step * 7919) % 13) / 13.0;
  c.tensors = records(specs(true), tp_rank, tp_size, static_cast<double>(step));
  return c;
}

ckpt::ManagerOptions loop_options() {
  ckpt::ManagerOptions options;
  options.keep = 2;
  options.higher_is_better = true;
  return options;
}

// Whether `targets`, loaded from `dir`, hold the values of `loaded`'s step.
bool values_match(const std::vector<ckpt::TensorRecord>& targets, const ckpt::Loaded& loaded,
                  int tp_rank, int tp_size) {
  const auto expected = records(specs(true), tp_rank, tp_size, static_cast<double>(loaded.step));
  bool ok = loaded.trainer_state.value("step", std::int64_t{-1}) == loaded.step;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (!torch::equal(targets[i].local, expected[i].local)) {
      std::cerr << "FAIL: " << loaded.path << ": " << targets[i].name << " does not hold step "
                << loaded.step << "'s values\n";
      ok = false;
    }
  }
  return ok;
}

// Every committed step_<N> and the one `latest` names verify. Local.
bool committed_checkpoints_verify(const std::string& run_dir) {
  bool ok = true;
  for (const std::string& dir : ckpt::list_checkpoints(run_dir)) {
    const ckpt::Verification v = ckpt::verify(dir);
    if (!v.ok) {
      std::cout << "FAIL: committed checkpoint " << dir << " does not verify: " << v.reason << "\n";
      ok = false;
    }
  }
  if (auto latest = ckpt::read_latest(run_dir)) {
    const ckpt::Verification v = ckpt::verify(*latest);
    if (!v.ok) {
      std::cout << "FAIL: latest names " << *latest << ", which does not verify: " << v.reason
                << "\n";
      ok = false;
    }
  }
  return ok;
}

// The check of a restart, in one process: prints "ok step_<N>", "none" or FAIL lines; sets *step
// to the step found (0: none).
bool check_local(const std::string& run_dir, std::int64_t* step) {
  *step = 0;
  bool ok = committed_checkpoints_verify(run_dir);
  const ckpt::ResumeChoice choice = ckpt::choose_resume(run_dir, "auto");
  if (!choice.path) {
    std::cout << (ok ? "none" : "FAIL: nothing to resume from") << std::endl;
    return ok;
  }
  if (!ckpt::parse_step_dir_name(fs::path(*choice.path).filename().string())) {
    std::cout << "FAIL: resume = auto picked " << *choice.path << ", not a committed step_<N>\n";
    return false;
  }
  auto targets = records(specs(true), 0, 1, -1);
  const ckpt::Loaded loaded = ckpt::load_local(*choice.path, targets);
  *step = loaded.step;
  ok = values_match(targets, loaded, 0, 1) && ok;
  std::cout << (ok ? "ok " : "FAIL ") << fs::path(*choice.path).filename().string() << std::endl;
  return ok;
}

int parse_int_option(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 0; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

std::string parse_option(int argc, char** argv, const std::string& name) {
  for (int i = 0; i + 1 < argc; ++i) {
    if (argv[i] == name) return argv[i + 1];
  }
  return "";
}

int loop(const std::string& run_dir, int argc, char** argv) {
  hpctrain::runtime::Runtime runtime(&argc, &argv);
  hpctrain::log::configure(runtime.world_rank(), runtime.host(), hpctrain::log::Level::kWarn,
                           false);
  const int tp = parse_int_option(argc, argv, "--tp", 1);
  const std::string pid_dir = parse_option(argc, argv, "--pid-dir");
  hpctrain::runtime::ProcessGrid grid(runtime, tp);
  ckpt::CheckpointManager manager(run_dir, grid, loop_options());
  std::int64_t step = 0;
  if (runtime.world_rank() == 0 && !check_local(run_dir, &step)) {
    hpctrain::runtime::abort_job(1);
  }
  // The real resume path (resolve, then every rank loads its slab) must find the same.
  if (auto dir = manager.resolve("auto")) {
    auto targets = records(specs(true), grid.tp_rank(), grid.tp_size(), -1);
    const ckpt::Loaded loaded = manager.load(*dir, targets);
    if (!values_match(targets, loaded, grid.tp_rank(), grid.tp_size())) {
      hpctrain::runtime::abort_job(1);
    }
    step = loaded.step;
  }
  if (!pid_dir.empty()) {
    fs::create_directories(pid_dir);
    std::ofstream(pid_dir + "/" + std::to_string(runtime.world_rank()) + ".pid")
        << ::getpid() << "\n";
  }
  for (int i = 0; i < 100000; ++i) {
    manager.save(content_of(++step, grid.tp_rank(), grid.tp_size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // "training"
  }
  manager.wait();
  return 0;
}

// A child that resumes and saves with save_local until it is killed (or kills itself at a
// crash point). Never returns.
[[noreturn]] void local_saver(const std::string& run_dir, const char* crash_at) {
  if (crash_at) setenv("HPCTRAIN_TEST_CHECKPOINT_CRASH", crash_at, 1);
  std::int64_t step = 0;
  const ckpt::ResumeChoice choice = ckpt::choose_resume(run_dir, "auto");
  if (choice.path) step = *ckpt::parse_step_dir_name(fs::path(*choice.path).filename().string());
  try {
    for (int i = 0; i < 100000; ++i)
      ckpt::save_local(run_dir, content_of(++step, 0, 1), loop_options());
  } catch (const std::exception& e) {
    std::cout << "FAIL: saving: " << e.what() << std::endl;
    _exit(1);
  }
  _exit(0);
}

// Runs local_saver in a child; kills it after `delay_ms` unless it dies first. Returns whether
// it died of SIGKILL.
bool run_child(const std::string& run_dir, const char* crash_at, int delay_ms) {
  std::cout << std::flush;
  const pid_t child = ::fork();
  if (child == 0) local_saver(run_dir, crash_at);
  if (delay_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

int local(const std::string& run_dir, int argc, char** argv) {
  const int kills = parse_int_option(argc, argv, "--kills", 6);
  std::mt19937 random(static_cast<unsigned>(parse_int_option(argc, argv, "--seed", 5)));
  bool ok = true;
  std::int64_t step = 0;
  for (const char* phase : {"after-create", "after-data", "after-manifest", "after-rename",
                            "after-latest", "during-retention"}) {
    const std::string crash = std::string(phase) + ":2";
    if (!run_child(run_dir, crash.c_str(), 0)) {
      std::cout << "FAIL: the saver did not die at " << phase << "\n";
      ok = false;
    }
    std::cout << "restart after crash at " << phase << " (1 rank): " << std::flush;
    ok = check_local(run_dir, &step) && ok;
  }
  for (int i = 1; i <= kills; ++i) {
    const int delay = 150 + static_cast<int>(random() % 400);  // start-up ~100 ms, then saving
    run_child(run_dir, nullptr, delay);
    std::cout << "restart after random kill after " << delay << " ms (1 rank): " << std::flush;
    ok = check_local(run_dir, &step) && ok;
  }
  return ok && step > 0 ? 0 : 1;
}

int export_checkpoint(const std::string& run_dir, const std::string& expected_json, int argc,
                      char** argv) {
  hpctrain::runtime::Runtime runtime(&argc, &argv);
  hpctrain::log::configure(runtime.world_rank(), runtime.host(), hpctrain::log::Level::kWarn,
                           false);
  hpctrain::runtime::ProcessGrid grid(runtime, parse_int_option(argc, argv, "--tp", 1));
  ckpt::CheckpointManager manager(run_dir, grid, {});
  const std::vector<Spec> all = specs(false);
  ckpt::SaveContent c;
  c.step = 42;
  c.trainer_state = {{"step", 42}};
  c.config_text = "driver: export\n";
  c.tensors = records(all, grid.tp_rank(), grid.tp_size(), 0.5);
  manager.save(std::move(c));
  manager.wait();
  if (runtime.world_rank() == 0) {
    nlohmann::json j;
    for (const Spec& s : all) {
      torch::Tensor v = logical_value(s, 0.5).to(torch::kDouble).contiguous().view({-1});
      j[s.name] = {
          {"dtype", c10::toString(s.dtype)},
          {"shape", s.shape},
          {"values", std::vector<double>(v.data_ptr<double>(), v.data_ptr<double>() + v.numel())}};
    }
    std::ofstream(expected_json) << j.dump(1) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: checkpoint_driver loop|local|check|export RUN_DIR [...]\n";
    return 2;
  }
  const std::string mode = argv[1];
  const std::string run_dir = argv[2];
  hpctrain::log::configure(0, "localhost", hpctrain::log::Level::kWarn, false);
  try {
    if (mode == "loop") return loop(run_dir, argc, argv);
    if (mode == "local") return local(run_dir, argc, argv);
    if (mode == "check") {
      std::int64_t step = 0;
      return check_local(run_dir, &step) ? 0 : 1;
    }
    if (mode == "export" && argc >= 4) return export_checkpoint(run_dir, argv[3], argc, argv);
  } catch (const hpctrain::Error& e) {
    std::cout << "FAIL: " << e.what() << std::endl;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) hpctrain::runtime::abort_job(1);
    return 1;
  }
  return 2;
}
