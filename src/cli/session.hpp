#pragma once
// A command's distributed session: process grid, device binding and group communicators, built
// the same way by every command that computes (env, bench, train, eval).

#include <memory>
#include <string>

#include "command.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/environment.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/runtime/device.hpp"
#include "hpctrain/runtime/process_grid.hpp"

namespace hpctrain::cli {

struct Session {
  std::unique_ptr<runtime::ProcessGrid> grid;
  runtime::DeviceBinding device;
  comm::GroupCommunicators comms;  ///< data plane
  comm::ControlGroups control;     ///< control plane (host values)
};

/// Validates the grid (tp x pp must divide the world size: a ConfigError on every rank before any
/// collective), binds the device and builds the communicators. Collective over the world.
Session make_session(CommandContext& ctx, int tp, int pp = 1);

/// The session as the environment Trainer and OfflineEvaluator take. Local.
comm::Environment environment(const CommandContext& ctx, const Session& session);

}  // namespace hpctrain::cli
