#pragma once
// A device scalar read on the host (`.item()`), under the collective watchdog: on a GPU the read
// waits for every collective queued before the value was computed, so it is where a rank blocks
// when a peer never joins one (runtime/collective_scope.hpp, HostSyncScope). The gradient norm,
// the loss and every other per-step read of a device value go through here; on the CPU a tensor
// is already computed and the read is direct.

#include <torch/torch.h>

#include "hpctrain/runtime/collective_scope.hpp"

namespace hpctrain::comm {

/// `value.item<T>()`; on a device, watched as a host sync named `what` (a string literal, "gradient
/// norm"): a wait past the collective timeout ends the job with exit 7 naming the collective it
/// waits behind. Local.
template <typename T>
T host_value(const torch::Tensor& value, const char* what) {
  if (value.device().is_cpu()) return value.item<T>();
  runtime::HostSyncScope watch(what);
  return value.item<T>();
}

}  // namespace hpctrain::comm
