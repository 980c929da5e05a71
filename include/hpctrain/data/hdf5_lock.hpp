#pragma once
// One process-wide lock around HDF5. Debian's parallel HDF5 (like most parallel builds) is not
// thread-safe, and the Prefetcher reads datasets on a background thread: any code that calls
// HDF5 while a Prefetcher may be running (checkpoint writers, evaluators) must hold this lock for
// the duration of its HDF5 calls. Holding it across an MPI collective is safe: the prefetch thread
// only ever waits for it, it never joins collectives.

#include <mutex>

namespace hpctrain::data {

/// The lock every HDF5 caller in the process shares. Recursive, so helpers may nest. Local.
std::recursive_mutex& hdf5_mutex();

/// Holds hdf5_mutex() for as long as it lives:
/// `auto hold = hpctrain::data::lock_hdf5();` before a block of HDF5 calls. Local.
inline std::unique_lock<std::recursive_mutex> lock_hdf5() {
  return std::unique_lock<std::recursive_mutex>(hdf5_mutex());
}

}  // namespace hpctrain::data
