#pragma once
// Subcommand registry. Each cmd_*.cpp registers its command with a static CommandRegistration;
// main() builds the CLI11 tree from the registry, parses, starts the runtime and runs the one
// command chosen. Command sources are compiled into the executable itself (not a static
// library), so their static registrations are never dropped by the linker.

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::cli {

/// Options every command accepts (before or after the command name).
struct GlobalOptions {
  int verbosity = 0;                  ///< -v: debug lines; -vv more
  bool quiet = false;                 ///< -q: warnings and errors only
  bool log_all_ranks = false;         ///< every rank logs, lines prefixed with rank/host
  int threads = 0;                    ///< intra-op threads per rank, 0 = derive
  std::string device = "auto";        ///< auto | cpu | cuda
  std::string comm_backend = "auto";  ///< auto | mpi | nccl
  double collective_timeout = 600;    ///< seconds before a stuck collective aborts the job
  double peer_timeout = 20;           ///< seconds of silence before a neighbour rank counts as lost
  std::vector<std::string> plugins;   ///< --plugin: shared libraries of models to load
};

/// What a command's run function receives.
struct CommandContext {
  runtime::Runtime& runtime;
  const GlobalOptions& global;
};

/// Registers `path` ("env", "bench allreduce", ...). `add_options` adds the command's options to
/// its CLI11 app; `run` returns the process exit code; `mpi` says whether the command needs MPI
/// even when started without a launcher (Runtime::Start). Local (static initialisation).
struct CommandRegistration {
  CommandRegistration(std::string path, std::string description,
                      std::function<void(CLI::App&)> add_options,
                      std::function<int(CommandContext&)> run,
                      runtime::Runtime::Start mpi = runtime::Runtime::Start::kMpi);
};

/// Registers command `path` whose options are one `Options` value held by the registry (no
/// command keeps file-scope option globals): `add_options` binds its fields to the command's CLI11
/// options, `run` receives it once the command line is parsed. Local (static initialisation):
///   const CommandRegistration train_command = command<TrainOptions>("train", "...", add, run);
/// Name the registration after its command: the cli sources are compiled in unity batches, where
/// file-local names of different files must differ.
template <class Options>
CommandRegistration command(std::string path, std::string description,
                            std::function<void(CLI::App&, Options&)> add_options,
                            std::function<int(CommandContext&, Options&)> run,
                            runtime::Runtime::Start mpi = runtime::Runtime::Start::kMpi) {
  auto options = std::make_shared<Options>();
  return CommandRegistration(
      std::move(path), std::move(description),
      [options, add_options = std::move(add_options)](CLI::App& app) {
        add_options(app, *options);
      },
      [options, run = std::move(run)](CommandContext& ctx) { return run(ctx, *options); }, mpi);
}

struct RegisteredCommand {
  std::vector<std::string> path;
  std::string description;
  std::function<void(CLI::App&)> add_options;
  std::function<int(CommandContext&)> run;
  /// How the command uses MPI: kLocal for commands that work in one process.
  runtime::Runtime::Start mpi = runtime::Runtime::Start::kMpi;
};

/// Every registered command, in registration order. Local.
std::vector<RegisteredCommand>& command_registry();

}  // namespace hpctrain::cli
