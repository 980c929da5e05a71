#pragma once
// Which operation this rank waits in: every CollectiveScope (collective_scope.hpp) enters its
// operation here and leaves it at its end, so a position can say whom the rank waits for (the
// peers of a point-to-point batch, the group of a collective), and a hang report can follow a
// wait from rank to rank (hang_attribution.hpp). Private to src/runtime.

#include <cstdint>
#include <vector>

#include "hpctrain/runtime/hang_attribution.hpp"

namespace hpctrain::runtime {

class Channel;

/// Marks an operation entered by the calling thread: a collective numbered `seq` on `channel`,
/// or a point-to-point batch (`channel` nullptr) of group `group` with `peers` (world ranks).
/// Scopes nest per thread: leave_operation ends the calling thread's newest. Tells the position
/// listener (the rank moved). Local, thread-safe (a mutex, no allocation).
void enter_operation(Channel* channel, std::uint64_t seq, const char* op, const char* group,
                     const std::vector<int>& peers);
/// Marks the calling thread's newest entered operation left. Local, thread-safe.
void leave_operation();
/// The operation this rank has been in longest (active), else the last one it left; known false
/// before the first. Local, thread-safe.
OperationPosition current_operation();

}  // namespace hpctrain::runtime
