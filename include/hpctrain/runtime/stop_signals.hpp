#pragma once
// Stop requests from the scheduler: SIGUSR1 (Slurm's --signal), SIGTERM (preemption, scancel) and
// SIGINT. What a signal does depends on where the process is:
//  - in the training step loop (StopMode::kAgree) it only sets a flag (async-signal-safe); the
//    trainer combines the flag across all ranks at a step boundary, then every rank saves and
//    exits together (docs/ARCHITECTURE.md, invariant 2);
//  - anywhere else (StopMode::kExit: before the loop starts, while files are opened and checked,
//    in evaluation-only commands) there is nothing to save, and the process may be blocked in a
//    system call that would restart (a FIFO given as a data file): the handler writes one line to
//    stderr and ends the process at once with kExitRequeue (75), so a requeued job starts over.

namespace hpctrain::runtime {

/// What a stop signal does; see the file comment.
enum class StopMode { kExit, kAgree };

/// Installs the handlers (mode kExit until set_stop_mode says otherwise). Local; idempotent.
/// `what` names the command in the line printed on an immediate exit ("train", "eval").
void install_stop_signal_handlers(const char* what = "hpctrain");
/// Switches the mode. A flag set earlier stays set (the step loop acts on it). Local.
void set_stop_mode(StopMode mode);
/// The mode in effect. Local.
StopMode stop_mode();
/// Holds `mode` for a scope and restores the previous one after. Local.
class StopModeScope {
 public:
  explicit StopModeScope(StopMode mode) : previous_(stop_mode()) { set_stop_mode(mode); }
  ~StopModeScope() { set_stop_mode(previous_); }
  StopModeScope(const StopModeScope&) = delete;
  StopModeScope& operator=(const StopModeScope&) = delete;

 private:
  StopMode previous_;
};
/// The signal number received (0 if none). Local; cheap enough to call every step.
int stop_signal_received();
/// Sets the flag as if `signal_number` arrived (tests, time limits). Local.
void request_stop(int signal_number);
/// Clears the flag. Local.
void clear_stop_request();
/// Notes that world rank `world_rank` is ending the job after its own error, with `exit_code`
/// (its announcement on the heartbeat ring, runtime/peer_monitor.hpp). A stop signal that then ends
/// this process at once (the launcher's, after that rank's MPI_Abort) says so and exits with that
/// code, instead of reporting a stop with nothing to save and 75. The first note stays. Local;
/// async-signal-safe.
void note_job_abort(int world_rank, int exit_code);
/// Notes that this rank is ending with `exit_code` after an error every rank agreed on (an
/// Agreed error: world rank 0 printed it; cli/main.cpp). A stop signal that then ends this process
/// at once (the launcher's, once a faster rank exited non-zero) exits with that code and prints
/// nothing: the job's one message is rank 0's. Local; async-signal-safe.
void note_agreed_exit(int exit_code);
/// The code note_agreed_exit noted, or -1 when this rank is not ending after an agreed error.
/// Local; async-signal-safe.
int agreed_exit_code();
/// "SIGUSR1" for 10, etc. Local.
const char* signal_name(int signal_number);

}  // namespace hpctrain::runtime
