#pragma once
// The collective flight recorder: a ring of this rank's last N collective and point-to-point
// operations (channel, operation, sequence number, bytes, dtype; enqueue, start and end times),
// kept always (a few atomic stores per operation), and written to RUN_DIR/flight/rank-K.json when
// something goes wrong: a collective timeout, a lost rank, SIGUSR2, or a stop signal with
// logging.flight_dump. Each file also holds this rank's position (step, phase, every channel's
// last entered and completed collective) and the positions of the other ranks as the heartbeat
// ring last carried them, so `hpctrain trace flight RUN_DIR` can name the rank a hang waited for
// even when that rank wrote no file. docs/OBSERVABILITY.md describes the files.

#include <cstddef>
#include <cstdint>
#include <string>

namespace hpctrain::runtime {

class Channel;

/// Why a flight file is written (its "reason" field).
enum class DumpReason : std::uint8_t {
  kCollectiveTimeout = 0,  ///< this rank's watchdog, or another rank's, fired
  kLostRank = 1,           ///< the peer monitor lost a rank
  kSignal = 2,             ///< SIGUSR2 reached this rank
  kRequested = 3,          ///< another rank got SIGUSR2 and asked every rank to write
  kStopSignal = 4,         ///< a stop signal ended training (logging.flight_dump)
};
/// "collective timeout", "lost rank", "SIGUSR2", "requested by another rank", "stop signal".
const char* dump_reason_name(DumpReason reason);

/// Process-wide flight recorder (see the file comment).
class FlightRecorder {
 public:
  static constexpr std::size_t kDefaultRecords = 2000;

  /// Keeps the last `records` operations from now on (0: none; sequence numbers and positions
  /// are counted anyway). Local; call where no other thread records (before training starts).
  static void configure(std::size_t records);
  /// The number of operations kept (0: off). Local.
  static std::size_t capacity();
  /// Operations recorded since the process started (while on). Local.
  static std::int64_t recorded();
  /// Files go to `directory`/rank-`world_rank`.json; "" writes none. Local.
  static void set_directory(const std::string& directory, int world_rank, const std::string& host);
  /// The directory files go to ("" when none). Local.
  static std::string directory();

  /// Writes this rank's file now (atomically: a temporary file, then rename) and returns its
  /// path, or "" when no directory is set or the write failed (a warning says why). Local,
  /// thread-safe, never throws.
  static std::string dump(DumpReason reason);
  /// Asks the dump thread to write the file soon and returns at once (a heartbeat thread, a
  /// signal handler: async-signal-safe); once written, the peer monitor is told
  /// (PeerMonitor::after_dump). Without the dump thread it writes now. Local.
  static void request_dump(DumpReason reason);
  /// Starts the dump thread and installs the SIGUSR2 handler: SIGUSR2 makes this rank write its
  /// file and ask every other rank, over the heartbeat ring, to write theirs. Local; once.
  static void install();
  /// Whether the dump thread runs (install() was called). Local.
  static bool installed();

  /// Recording points (used by CollectiveScope): a new record for operation `op` (a string
  /// literal) number `seq` on `channel` (nullptr: a point-to-point operation, seq 0), enqueued
  /// now; returns its id, or -1 when the recorder is off. Local, thread-safe, lock-free.
  static std::int64_t record_issue(Channel* channel, std::uint64_t seq, const char* op,
                                   std::int64_t bytes, const char* dtype);
  /// The operation started / ended (`ok` false: it failed with an error). Local, lock-free.
  static void record_start(std::int64_t id);
  static void record_end(std::int64_t id, bool ok);
  /// The operation ran on a device from `start_ns` to `end_ns` (steady-clock nanoseconds, from
  /// CUDA timing events on the communicator's stream) and completed: these replace the host's
  /// start and end, and the record says "clock": "device". Local, lock-free.
  static void record_device_times(std::int64_t id, std::int64_t start_ns, std::int64_t end_ns);
};

/// Moves the flight files an earlier job left in RUN_DIR/flight into RUN_DIR/flight/previous
/// (replacing what was there), so that a resumed run's files are not merged with them. Local
/// (rank 0 at the start of a run); never throws (a warning says what failed).
void set_aside_flight_files(const std::string& run_dir);

}  // namespace hpctrain::runtime
