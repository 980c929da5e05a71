#pragma once
// Who hears of this rank's moves (position.hpp): the peer monitor, which sends each move to the
// other ranks at once instead of with its next heartbeat. Private to src/runtime.

namespace hpctrain::runtime {

/// Calls `listener` after every move of this rank: a new step or phase, a collective entered or
/// completed. It runs on the thread that moved, so it must be cheap and must not block; nullptr:
/// none. Local, thread-safe.
void set_position_listener(void (*listener)());
/// Calls the listener: this rank moved in a way the counters of position.hpp do not show (an
/// operation entered or left: operation_tracker.hpp). Local, lock-free.
void notify_position_listener();

}  // namespace hpctrain::runtime
