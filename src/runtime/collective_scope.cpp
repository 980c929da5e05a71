#include "hpctrain/runtime/collective_scope.hpp"

#include <exception>

#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "operation_tracker.hpp"

namespace hpctrain::runtime {

IssuedOp issue_op(Channel* channel, const char* op, const char* group, std::size_t bytes,
                  const char* dtype) {
  IssuedOp issued;
  issued.channel = channel;
  issued.seq = channel ? channel->issue() : 0;
  issued.op = op;
  issued.group = group;
  issued.bytes = bytes;
  issued.record = FlightRecorder::record_issue(channel, issued.seq, op,
                                               static_cast<std::int64_t>(bytes), dtype);
  return issued;
}

CollectiveScope::CollectiveScope(Channel* channel, const char* op, const char* group,
                                 std::size_t bytes, const char* dtype, bool watched)
    : CollectiveScope(issue_op(channel, op, group, bytes, dtype), watched) {}

CollectiveScope::CollectiveScope(const IssuedOp& issued, bool watched)
    : op_(issued), exceptions_(std::uncaught_exceptions()) {
  if (watched) {
    watch_.emplace(op_.op, op_.group, op_.bytes, op_.channel, op_.seq, op_.detail, op_.peers);
  }
  enter();
}

void CollectiveScope::enter() {
  // Before the channel's counter moves, so the position that move sends names whom it waits for.
  enter_operation(op_.channel, op_.seq, op_.op, op_.group,
                  op_.channel ? op_.channel->members() : op_.peers);
  if (op_.channel) op_.channel->enter(op_.seq, op_.op);
  FlightRecorder::record_start(op_.record);
}

CollectiveScope::~CollectiveScope() {
  const bool failed = std::uncaught_exceptions() > exceptions_;
  if (op_.channel && !failed) op_.channel->complete(op_.seq, op_.op);
  leave_operation();
  FlightRecorder::record_end(op_.record, !failed);
}

HostSyncScope::HostSyncScope(const char* what) {
  if (Watchdog::timeout() <= 0) return;
  // A data-plane channel (named after its group alone: the control planes' collectives block the
  // host and are watched where they run) with a collective queued and not seen complete.
  Channel* pending = nullptr;
  for (Channel* c : channels()) {
    if (c->name() == c->group() && c->entered() > c->completed()) {
      pending = c;
      break;
    }
  }
  std::string detail = str("the host waits on the device for the ", what);
  if (pending == nullptr) {
    watch_.emplace("host sync", "device", 0, nullptr, 0, std::move(detail));
    return;
  }
  // Channels live as long as the process, so the group's name outlives the slot.
  watch_.emplace(pending->entered_op(), pending->group().c_str(), 0, pending, pending->entered(),
                 str(detail, ", computed after this collective"));
}

}  // namespace hpctrain::runtime
