#pragma once
// A command's distributed session: process grid, device binding and group communicators, built
// the same way by every command that computes (env, bench, train, eval).

#include <memory>
#include <string>
#include <vector>

#include "command.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/environment.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/parallel/parallel_config.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/device.hpp"
#include "hpctrain/runtime/process_grid.hpp"

namespace hpctrain::cli {

struct Session {
  std::unique_ptr<runtime::ProcessGrid> grid;
  runtime::DeviceBinding device;
  comm::GroupCommunicators comms;  ///< data plane
  comm::ControlGroups control;     ///< control plane (host values)
};

/// A run config as `train` and `bench train` read it: the file, the overrides, the parallel
/// section and its fit to the world (tp x pp divides the world size, parallel.shard_group divides
/// the data-parallel group). Every rank checks alike, so the checks end in the startup agreement
/// (comm/startup_agreement.hpp): one message from world rank 0, every rank ends with the code.
/// Collective over the world (one agreement, before any other collective).
struct RunConfig {
  Config config;
  parallel::ParallelConfig parallel;
};
RunConfig load_run_config(CommandContext& ctx, const std::string& path,
                          const std::vector<std::string>& overrides);

/// Validates the grid (tp x pp must divide the world size: an agreed ConfigError, printed once,
/// before any other collective), binds the device and builds the communicators. Collective over
/// the world.
Session make_session(CommandContext& ctx, int tp, int pp = 1);

/// The session as the environment Trainer and OfflineEvaluator take. Local.
comm::Environment environment(const CommandContext& ctx, const Session& session);

}  // namespace hpctrain::cli
