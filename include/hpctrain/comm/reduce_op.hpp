#pragma once
// Reduction operators shared by the data plane (Communicator, on device tensors) and the control
// plane (ControlPlane, on host values). No LibTorch here, so host-only code can use them.

#include <string>

namespace hpctrain::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };

/// "sum", "avg", "max", "min". Local.
const char* reduce_op_name(ReduceOp op);
/// Parses a reduce op name; throws ConfigError on an unknown name. Local.
ReduceOp parse_reduce_op(const std::string& name);

}  // namespace hpctrain::comm
