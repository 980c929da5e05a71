#pragma once
// Peer monitor: heartbeats between neighbouring ranks over hpctrain's own TCP connections, so that
// the ranks that survive a dead process or node end promptly, naming the lost rank and its host,
// with the exit code of a communicator failure (kExitComm). MPI does not do this: OpenMPI's TCP
// transport prints "peer process has unexpectedly disconnected" (or nothing at all, when the node
// went silent) and its collectives then wait forever.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/hang_attribution.hpp"

namespace hpctrain::runtime {

class Runtime;

/// Process-wide heartbeat monitor over a ring of the world's ranks: each rank keeps a connection
/// to its successor and one from its predecessor, sends a heartbeat on both every second and
/// watches for theirs. A neighbour that falls silent for the timeout, or whose connection closes
/// without a goodbye, is lost: the rank that noticed passes the loss along the ring, so every
/// surviving rank learns it within milliseconds, and each of them logs the lost rank and host and
/// ends with kExitComm. Checkpoints stay safe: a save interrupted there leaves only a temporary
/// directory (docs/CHECKPOINTS.md, "What a crash leaves").
///
/// The heartbeat also carries each rank's position (position.hpp: step, phase, per channel the
/// last collective entered and completed; and the operation it waits in, with its peers),
/// passed along the ring in both directions, so every rank knows every other rank's latest
/// position (a record of 24 + 16 bytes per active channel, + 16 and 4 per peer for the operation,
/// per rank per second; docs/OBSERVABILITY.md gives the measured rate). The lost-rank message
/// names the lost rank's last position, the watchdog's hang report uses them all, and the ring
/// carries the few messages that make a hang reported once and every flight file written.
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

  /// The latest known position of every world rank, by world rank: this rank's own as of now,
  /// the others' as the ring last carried them (known false where nothing was heard). Only this
  /// rank's own when the monitor is off. Local, thread-safe.
  static std::vector<RankPosition> positions();
  /// Decides which rank reports a collective timeout for the whole job and returns its world
  /// rank: the first rank to claim it (the lowest of claims made at once); this rank when the
  /// monitor is off. A claim also asks every rank to write its flight file. Blocks for up to
  /// about half a second (the claims must cross the ring). Local; call from one thread.
  static int claim_hang_report();
  /// Waits until every rank heard from recently has written its flight file after a hang claim,
  /// or `seconds` passed. Local.
  static void wait_for_dumps(double seconds);
  /// Told by the flight recorder after a dump it was asked for: a dump for a hang claim is
  /// acknowledged to the claimant; one for SIGUSR2 asks every other rank to write too. Local.
  static void after_dump(DumpReason reason);
  /// How long this process was last stopped or starved (its heartbeat thread ran that late; 0:
  /// never), and in `ended_ago_s` how long ago that ended. Local.
  static double last_stall(double& ended_ago_s);
  /// Bytes this rank sent to its neighbours since start(), and the seconds since start() (the
  /// ring's cost). Local.
  static std::uint64_t bytes_sent();
  static double seconds_running();
};

}  // namespace hpctrain::runtime
