#pragma once
// Collective watchdog: a collective that has not completed after the configured timeout is
// reported (rank, host, operation, group, how long) and the job is aborted, so a job whose
// peer died or diverged never hangs silently until the scheduler's time limit. With the peer
// monitor running, the report also names the ranks the collective waits for and where each of
// them is (hang_attribution.hpp), it is printed once for the job (the ranks agree over the
// heartbeat ring which of them prints), and every rank writes its flight recorder file first.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::runtime {

class Channel;

/// Process-wide watchdog over blocking collectives.
class Watchdog {
 public:
  /// Starts the monitor thread with `timeout_s` (<= 0 disables). Local; call once after MPI init.
  static void start(double timeout_s);
  /// Stops the monitor thread. Local.
  static void stop();
  /// Current timeout in seconds (0 when disabled). Local.
  static double timeout();

  /// Marks one collective in flight on this thread for as long as the scope lives. Local.
  class Scope {
   public:
    Scope(const char* operation, const char* group, std::size_t bytes);
    /// The same for collective number `seq` of `channel` (the attribution compares it with the
    /// other ranks' positions); `channel` nullptr: not numbered (point-to-point). `detail` is
    /// added to the report (the peers of a point-to-point batch: "recv from group rank 1 = world
    /// rank 3"), and the positions of `peers` (their world ranks). A point-to-point wait whose
    /// peers are all heard alive leaves the report to a rank that waits on a silent one, which
    /// is nearer the cause (it defers its claim by a few seconds).
    Scope(const char* operation, const char* group, std::size_t bytes, Channel* channel,
          std::uint64_t seq, std::string detail = std::string(),
          std::vector<int> peers = std::vector<int>());
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int slot_ = -1;
  };
};

}  // namespace hpctrain::runtime
