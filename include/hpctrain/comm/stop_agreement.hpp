#pragma once
// The collective stop decision (invariant 2 of docs/ARCHITECTURE.md: every rank agrees before
// anyone acts). Each rank brings what it saw locally: a stop signal (SIGUSR1, SIGTERM, SIGINT),
// that the wall-time deadline is near, that a time-based checkpoint is due. One small control-
// plane all-reduce combines them, so a signal delivered to a single rank stops every rank at the
// same step. It lives in comm because it needs the control plane (the runtime layer, which owns
// the signal flag, sits below comm).

#include "hpctrain/comm/control_plane.hpp"

namespace hpctrain::comm {

/// What one rank asks for, and (after agree()) what the group decided. Local value type.
struct StopRequest {
  int signal = 0;             ///< signal number received (0: none); the largest wins across ranks
  bool deadline = false;      ///< the wall-time budget is nearly spent
  bool save_due = false;      ///< a time-based checkpoint is due
  bool save_pending = false;  ///< a background save's outcome is not known yet
  bool save_writing = false;  ///< ... and this rank (agreed: any rank) is still writing it

  bool operator==(const StopRequest& o) const {
    return signal == o.signal && deadline == o.deadline && save_due == o.save_due &&
           save_pending == o.save_pending && save_writing == o.save_writing;
  }
  /// Every rank's writer has finished the pending save: its outcome (or error) can be collected
  /// now without waiting. Meaningful on the agreed request.
  bool save_finished() const { return save_pending && !save_writing; }
};

class StopAgreement {
 public:
  /// Agrees over `group` (the world for training). Local.
  explicit StopAgreement(ControlPlane& group) : group_(group) {}

  /// Combines every rank's request: any rank's signal, deadline or due save holds for all. The
  /// agreed signal is remembered (signal()). Collective over the group.
  StopRequest agree(StopRequest local);
  /// agree() with this rank's pending stop signal only (runtime::stop_signal_received()): for
  /// checks between evaluation batches. True when a stop was agreed. Collective over the group.
  bool stop_requested();
  /// The first signal agreed so far (0: none). Local.
  int signal() const { return signal_; }

 private:
  ControlPlane& group_;
  int signal_ = 0;
};

}  // namespace hpctrain::comm
