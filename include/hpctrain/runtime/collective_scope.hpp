#pragma once
// One collective as the runtime follows it: numbered on its channel when issued (position.hpp),
// recorded in the flight recorder (flight_recorder.hpp), and watched by the collective watchdog
// while it runs (watchdog.hpp). The communicators of both planes wrap every collective in one
// CollectiveScope; an operation queued to a communication thread is issued where it is queued
// (issue order is what the ranks agree on) and entered where it runs. Point-to-point batches
// (pipeline stages) are recorded and watched alike but not numbered: only the two ranks of a pair
// take part, so no number could be the same on every member of the group.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/runtime/watchdog.hpp"

namespace hpctrain::runtime {

class Channel;

/// An operation issued but perhaps not started yet. Local value type.
struct IssuedOp {
  Channel* channel = nullptr;  ///< nullptr: not numbered (point-to-point)
  std::uint64_t seq = 0;
  std::int64_t record = -1;  ///< flight recorder id (-1: off)
  const char* op = "";       ///< string literal
  const char* group = "";    ///< the group's name for messages; must outlive the operation
  std::size_t bytes = 0;
  std::string detail;      ///< point-to-point: the peers, named in the watchdog's report
  std::vector<int> peers;  ///< point-to-point: the peers' world ranks (the report's positions)
};

/// Numbers `op` on `channel` and records it as enqueued now. Call in issue order. Local.
IssuedOp issue_op(Channel* channel, const char* op, const char* group, std::size_t bytes,
                  const char* dtype = "");

/// Marks an operation entered for the scope's lifetime (watchdog slot, position, flight record);
/// at its end the operation completed, or failed when an exception leaves the scope. Local.
class CollectiveScope {
 public:
  /// Issues and enters a blocking operation at once. `watched` false: no watchdog slot (waits
  /// that may legitimately last minutes).
  CollectiveScope(Channel* channel, const char* op, const char* group, std::size_t bytes,
                  const char* dtype = "", bool watched = true);
  /// Enters an operation issued earlier (issue_op).
  explicit CollectiveScope(const IssuedOp& issued, bool watched = true);
  ~CollectiveScope();
  CollectiveScope(const CollectiveScope&) = delete;
  CollectiveScope& operator=(const CollectiveScope&) = delete;

 private:
  void enter();

  IssuedOp op_;
  int exceptions_ = 0;
  std::optional<Watchdog::Scope> watch_;
};

/// A host wait for a value computed on the device (a `.item()` of the gradient norm or the loss)
/// for the scope's lifetime. On a GPU the host queues collectives without waiting for them
/// (CollectiveScope ends once a collective is queued), so the first host read of a device value
/// after them is where the rank blocks when a peer never joins one: without this scope such a wait
/// would hang unseen. Watched by the collective watchdog as the newest data-plane collective this
/// rank queued and has not seen complete (the wait covers every collective queued before it), or
/// as a "host sync" of the device alone when none is pending; `what` names the value in the
/// report. Costs one watchdog slot (a mutex, ~100 ns). Local.
class HostSyncScope {
 public:
  /// `what`: a string literal ("gradient norm").
  explicit HostSyncScope(const char* what);
  HostSyncScope(const HostSyncScope&) = delete;
  HostSyncScope& operator=(const HostSyncScope&) = delete;

 private:
  std::optional<Watchdog::Scope> watch_;
};

}  // namespace hpctrain::runtime
