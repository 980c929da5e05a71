#pragma once
// Stop requests from the scheduler: SIGUSR1 (Slurm's --signal), SIGTERM (preemption, scancel) and
// SIGINT only set a flag here (async-signal-safe). The trainer combines the flag across all ranks
// at a step boundary and then every rank saves and exits together (docs/ARCHITECTURE.md, invariant
// 2).

namespace hpctrain::runtime {

/// Installs the handlers. Local; idempotent.
void install_stop_signal_handlers();
/// The signal number received (0 if none). Local; cheap enough to call every step.
int stop_signal_received();
/// Sets the flag as if `signal_number` arrived (tests, time limits). Local.
void request_stop(int signal_number);
/// Clears the flag. Local.
void clear_stop_request();
/// "SIGUSR1" for 10, etc. Local.
const char* signal_name(int signal_number);

}  // namespace hpctrain::runtime
