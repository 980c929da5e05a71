// hpctrain: one binary, one subcommand per task. main() only parses the command line, starts the
// runtime and calls in; how the process ends on an error is decided here and nowhere else.

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "command.hpp"
#include "fork_server.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"

namespace hpctrain::cli {

std::vector<RegisteredCommand>& command_registry() {
  static std::vector<RegisteredCommand> registry;
  return registry;
}

CommandRegistration::CommandRegistration(std::string path, std::string description,
                                         std::function<void(CLI::App&)> add_options,
                                         std::function<int(CommandContext&)> run,
                                         runtime::Runtime::Start mpi) {
  RegisteredCommand command;
  command.mpi = mpi;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t space = path.find(' ', start);
    if (space == std::string::npos) space = path.size();
    command.path.push_back(path.substr(start, space - start));
    start = space + 1;
  }
  command.description = std::move(description);
  command.add_options = std::move(add_options);
  command.run = std::move(run);
  // Static registrations run in the order the linker lays the objects out (unity batches change
  // it): keep commands sorted by name, a group's subcommands in the order they registered.
  std::vector<RegisteredCommand>& registry = command_registry();
  auto at = std::upper_bound(registry.begin(), registry.end(), command.path.front(),
                             [](const std::string& name, const RegisteredCommand& other) {
                               return name < other.path.front();
                             });
  registry.insert(at, std::move(command));
}

namespace {

// Before MPI starts we only know our rank from the launcher's environment; used so that a usage
// error under `mpirun -np 64` is printed once, not 64 times.
bool first_rank_by_environment() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(var)) return std::string(value) == "0";
  }
  return true;
}

double timeout_from_environment(const char* variable, double fallback) {
  if (const char* value = std::getenv(variable)) {
    char* end = nullptr;
    double seconds = std::strtod(value, &end);
    if (end != value && *end == '\0' && seconds >= 0) return seconds;
    std::fprintf(stderr, "[hpctrain] warning: ignoring %s='%s' (not a number of seconds)\n",
                 variable, value);
  }
  return fallback;
}

// The options every command takes (before its name on the command line).
void add_global_options(CLI::App& app, GlobalOptions& global) {
  app.add_flag("-v,--verbose", global.verbosity, "More output (-v debug)");
  app.add_flag("-q,--quiet", global.quiet, "Only warnings and errors");
  app.add_flag("--log-all-ranks", global.log_all_ranks,
               "Every rank logs, each line prefixed with rank and host");
  app.add_option("--threads", global.threads,
                 "Intra-op CPU threads per rank (default: HPCTRAIN_THREADS, else the cores bound "
                 "to the rank, else node cores / ranks per node)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--device", global.device, "auto | cpu | cuda (GPU = local rank)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--comm-backend", global.comm_backend, "auto | mpi | nccl")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}));
  app.add_option("--collective-timeout", global.collective_timeout,
                 "Seconds a collective may wait before the job is aborted as hung; 0 disables "
                 "(default 600, or HPCTRAIN_COLLECTIVE_TIMEOUT)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--peer-timeout", global.peer_timeout,
                 "Seconds without a heartbeat before a neighbour rank counts as lost (its process "
                 "or node died): every rank then ends with exit 5; 0 disables (default 20, or "
                 "HPCTRAIN_PEER_TIMEOUT)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--plugin", global.plugins,
                 "Shared library of C++ models to load (repeatable; docs/MODELS.md); the config "
                 "key model.plugin does the same for one run");
}

using Leaves = std::vector<std::pair<CLI::App*, const RegisteredCommand*>>;

// Builds the subcommand tree from the registry ("bench allreduce" nests under "bench"): every
// command's leaf subcommand with the command it runs.
Leaves add_commands(CLI::App& app) {
  std::map<std::string, CLI::App*> groups;
  Leaves leaves;
  for (const RegisteredCommand& command : command_registry()) {
    CLI::App* parent = &app;
    std::string key;
    for (std::size_t i = 0; i + 1 < command.path.size(); ++i) {
      key += command.path[i] + " ";
      auto it = groups.find(key);
      if (it == groups.end()) {
        CLI::App* group = parent->add_subcommand(command.path[i], "");
        group->require_subcommand(1);
        group->fallthrough();
        it = groups.emplace(key, group).first;
      }
      parent = it->second;
    }
    CLI::App* leaf = parent->add_subcommand(command.path.back(), command.description);
    leaf->fallthrough();
    if (command.add_options) command.add_options(*leaf);
    leaves.emplace_back(leaf, &command);
  }
  for (auto& [key, group] : groups) {
    std::string names;
    for (auto* sub : group->get_subcommands({}))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    group->description(names);
  }
  return leaves;
}

// Runs the chosen command; how the process ends on an error is decided here.
int run_command(runtime::Runtime& rt, GlobalOptions& global, const RegisteredCommand& chosen) {
  CommandContext ctx{rt, global};
  try {
    runtime::PeerMonitor::start(rt, global.peer_timeout);
    auto load_plugins = [&] {
      for (const auto& plugin : global.plugins) model::load_plugin(plugin, "--plugin");
    };
    if (rt.mpi_started() && rt.world_size() > 1 && !global.plugins.empty()) {
      // Every rank loads the same files: one message (comm/startup_agreement.hpp).
      comm::ControlPlane world(rt.world(), "world");
      comm::StartupAgreement(world).run(load_plugins);
    } else {
      load_plugins();
    }
    return chosen.run(ctx);
  } catch (const Error& e) {
    if (dynamic_cast<const Agreed*>(&e) != nullptr) {
      // The same error on every rank: one message, and every rank stops by itself (quietly if
      // the launcher ends it first, once a faster rank exited).
      runtime::note_agreed_exit(e.exit_code());
      if (rt.world_rank() == 0) {
        log::error(clip(e.what(), 8000));
        runtime::write_outcome(e.exit_code(), clip(e.what(), 2000), 0);
      }
      return e.exit_code();
    }
    // Messages name values; a huge one (a 1 MB --set value) must not make a huge line.
    log::error(clip(e.what(), 8000));
    runtime::write_outcome(e.exit_code(), clip(e.what(), 2000), rt.world_rank());
    if (rt.world_size() > 1) runtime::abort_job(e.exit_code());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    log::error(
        "out of memory (an allocation failed): a size in the config or a data file asks for more "
        "memory than this machine has; check the sizes named in the config (model.*, "
        "data.batch_size, eval.batch_size) and the files' shapes (hpctrain inspect data)");
    if (rt.world_size() > 1) runtime::abort_job(kExitError);
    return kExitError;
  } catch (const c10::Error& e) {
    // LibTorch's own message, without its C++ stack trace.
    log::error(str("unexpected failure in LibTorch: ", clip(e.what_without_backtrace(), 2000)));
    if (rt.world_size() > 1) runtime::abort_job(kExitError);
    return kExitError;
  } catch (const std::exception& e) {
    log::error(str("unexpected failure: ", clip(e.what(), 2000)));
    if (rt.world_size() > 1) runtime::abort_job(kExitError);
    return kExitError;
  }
}

int run_main(int argc, char** argv) {
  runtime::tune_malloc();

  CLI::App app{"hpctrain: distributed training and evaluation of LibTorch models on HPC clusters",
               "hpctrain"};
  app.set_version_flag("--version", std::string("hpctrain ") + HPCTRAIN_VERSION);
  app.require_subcommand(1);
  app.fallthrough();

  GlobalOptions global;
  global.collective_timeout =
      timeout_from_environment("HPCTRAIN_COLLECTIVE_TIMEOUT", global.collective_timeout);
  global.peer_timeout = timeout_from_environment("HPCTRAIN_PEER_TIMEOUT", global.peer_timeout);
  add_global_options(app, global);

  const Leaves leaves = add_commands(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!first_rank_by_environment()) return e.get_exit_code() == 0 ? 0 : kExitUsage;
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsage;
  }

  const RegisteredCommand* chosen = nullptr;
  for (auto& [leaf, command] : leaves) {
    if (leaf->parsed()) chosen = command;
  }
  if (!chosen) return kExitUsage;

  runtime::Runtime rt(&argc, &argv, chosen->mpi);
  log::Level level = global.quiet           ? log::Level::kWarn
                     : global.verbosity > 0 ? log::Level::kDebug
                                            : log::Level::kInfo;
  log::configure(rt.world_rank(), rt.host(), level, global.log_all_ranks);
  runtime::Watchdog::start(global.collective_timeout);
  // A stop signal ends any command at once with 75 (the train step loop agrees on it instead).
  static std::string command_name;
  for (const std::string& part : chosen->path)
    command_name += (command_name.empty() ? "" : " ") + part;
  runtime::install_stop_signal_handlers(command_name.c_str());
  // SIGUSR2: every rank writes its flight recorder file (where the command set a directory).
  runtime::FlightRecorder::install();

  return run_command(rt, global, *chosen);
}

}  // namespace
}  // namespace hpctrain::cli

int main(int argc, char** argv) {
  // Test machinery only (fork_server.hpp): one loaded binary forks the commands a test asks for.
  if (const char* socket = std::getenv("HPCTRAIN_TEST_FORK_SERVER"); socket && *socket)
    return hpctrain::cli::serve_forked_commands(socket, hpctrain::cli::run_main);
  return hpctrain::cli::run_main(argc, argv);
}
