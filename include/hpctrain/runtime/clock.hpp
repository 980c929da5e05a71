#pragma once
// Elapsed time on the steady clock: one definition for every layer's timers (a copy per file
// collides with its neighbours in a unity batch, cmake/HpctrainTargets.cmake).

#include <chrono>

namespace hpctrain::runtime {

/// Seconds from `start` to now on the steady clock. Local.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace hpctrain::runtime
