#pragma once
// What distributed library code runs on: the job, its process grid, this rank's device, the
// data-plane communicators (model tensors on the device) and the control plane (host values over
// MPI). Built by the CLI (cli/session.hpp) for training and offline evaluation.

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/runtime/device.hpp"

namespace hpctrain::runtime {
class Runtime;
class ProcessGrid;
}  // namespace hpctrain::runtime

namespace hpctrain::comm {

/// Local value type; the runtime and grid it refers to outlive it.
struct Environment {
  /// Builds the control channels over the grid's groups. Local.
  Environment(const runtime::Runtime& runtime, const runtime::ProcessGrid& grid,
              runtime::DeviceBinding device, GroupCommunicators comms)
      : runtime(runtime),
        grid(grid),
        device(std::move(device)),
        comms(std::move(comms)),
        control(make_control_groups(grid)) {}

  const runtime::Runtime& runtime;
  const runtime::ProcessGrid& grid;
  runtime::DeviceBinding device;
  GroupCommunicators comms;  ///< data plane: model tensors on `device` only
  ControlGroups control;     ///< control plane: every host-side agreement
};

}  // namespace hpctrain::comm
