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
    /// rank 3").
    Scope(const char* operation, const char* group, std::size_t bytes, Channel* channel,
          std::uint64_t seq, std::string detail = std::string());
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    int slot_ = -1;
  };
};

}  // namespace hpctrain::runtime
