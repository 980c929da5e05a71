#pragma once
// What distributed library code runs on: the job, its process grid, this rank's device and the
// group communicators. Built by the CLI (cli/session.hpp) for training and offline evaluation.

#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/runtime/device.hpp"

namespace hpctrain::runtime {
class Runtime;
class ProcessGrid;
}  // namespace hpctrain::runtime

namespace hpctrain::comm {

/// Local value type; the runtime and grid it refers to outlive it.
struct Environment {
  const runtime::Runtime& runtime;
  const runtime::ProcessGrid& grid;
  runtime::DeviceBinding device;
  GroupCommunicators comms;
};

}  // namespace hpctrain::comm
