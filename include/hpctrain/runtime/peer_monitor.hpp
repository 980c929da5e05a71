#pragma once
// Peer monitor: heartbeats between neighbouring ranks over hpctrain's own TCP connections, so that
// the ranks that survive a dead process or node end promptly, naming the lost rank and its host,
// with the exit code of a communicator failure (kExitComm). MPI does not do this: OpenMPI's TCP
// transport prints "peer process has unexpectedly disconnected" (or nothing at all, when the node
// went silent) and its collectives then wait forever.

#include <string>

namespace hpctrain::runtime {

class Runtime;

/// Process-wide heartbeat monitor over a ring of the world's ranks: each rank keeps a connection
/// to its successor and one from its predecessor, sends a heartbeat on both every second and
/// watches for theirs. A neighbour that falls silent for the timeout, or whose connection closes
/// without a goodbye, is lost: the rank that noticed passes the loss along the ring, so every
/// surviving rank learns it within milliseconds, and each of them logs the lost rank and host and
/// ends with kExitComm. Checkpoints stay safe: a save interrupted there leaves only a temporary
/// directory (docs/CHECKPOINTS.md, "What a crash leaves").
class PeerMonitor {
 public:
  /// Connects this rank to its ring neighbours and starts the heartbeat thread. A neighbour
  /// silent for `timeout_s` seconds counts as lost; `timeout_s` <= 0 or a world of one rank
  /// disables the monitor. Collective over MPI_COMM_WORLD (every rank passes the same timeout).
  /// Never throws: where the connections cannot be made it warns and stays off on every rank
  /// (a dead peer is then noticed by the collective watchdog only).
  static void start(const Runtime& runtime, double timeout_s);
  /// Tells the neighbours this rank leaves on purpose (they report no loss when its connections
  /// close), stops the thread and closes the connections. Local; idempotent. Call before
  /// MPI_Finalize (Runtime's destructor does).
  static void stop();
  /// Tells the neighbours this rank is ending the job on purpose (abort_job) with `exit_code`, so
  /// that they do not report it as lost while the launcher ends them; they pass it along the ring,
  /// and the launcher's stop signal then ends each rank naming this rank's error
  /// (note_job_abort). Local, best effort, never blocks.
  static void announce_abort(int exit_code);
  /// Whether the heartbeat thread runs. Local.
  static bool running();
  /// The timeout in seconds the monitor runs with (0 when off). Local.
  static double timeout();
  /// Why the monitor is off after start() ("" when it runs or was disabled). Local.
  static std::string off_reason();
};

}  // namespace hpctrain::runtime
