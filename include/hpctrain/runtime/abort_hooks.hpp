#pragma once
// What must happen before abort_job ends the job: communicators whose pending work would
// otherwise keep the process alive (NCCL kernels waiting for a lost peer) register a hook that
// cancels it (ncclCommAbort).

#include <functional>

namespace hpctrain::runtime {

/// Registers `hook`, run by abort_job() before MPI_Abort; returns its id for remove_abort_hook.
/// A hook must not block or throw. Local, thread-safe.
int add_abort_hook(std::function<void()> hook);
/// Unregisters a hook (its owner is going away). Local, thread-safe.
void remove_abort_hook(int id);
/// Runs the registered hooks once, newest first. Called by abort_job(); Local.
void run_abort_hooks();

}  // namespace hpctrain::runtime
