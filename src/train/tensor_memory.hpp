#pragma once
// The bytes of host tensors alive at once (ledger.json "peak_tensor_bytes_per_rank"): a counting
// wrapper around LibTorch's CPU allocator, the host's counterpart of CUDA's
// max_memory_allocated. Peak resident memory (VmHWM) adds to it what no tensor owns: the
// process's libraries, MPI's and HDF5's buffers, thread stacks, and the heap's free space that
// glibc keeps (docs/PLAN.md, "Memory"). Private to the train layer.

#include <cstdint>

namespace hpctrain::train {

/// Installs the counting allocator as LibTorch's CPU allocator (once per process; later calls do
/// nothing). Tensors allocated before keep their own deleters and are not counted. Local.
void install_tensor_memory_counter();

/// Bytes of host tensors allocated through the counter and not yet freed. Local; thread-safe.
std::int64_t live_tensor_bytes();

/// The largest live_tensor_bytes() since the last reset (or the install). Local; thread-safe.
std::int64_t peak_tensor_bytes();

/// Restarts the peak at the bytes alive now. Local; thread-safe.
void reset_peak_tensor_bytes();

}  // namespace hpctrain::train
