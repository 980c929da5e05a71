#include "operation_tracker.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "hpctrain/runtime/position.hpp"
#include "position_listener.hpp"

namespace hpctrain::runtime {
namespace {

// A few slots suffice: at most the main thread, a communication thread and a prefetch thread
// are in operations at once (as in the watchdog). Fixed sizes: no allocation per operation.
constexpr int kSlots = 16;
constexpr std::size_t kMaxPeers = 8;
constexpr std::size_t kGroupChars = 32;
constexpr int kMaxDepth = 16;

struct Entry {
  bool busy = false;
  std::uint64_t ticket = 0;  // order of entry: the smallest busy one has waited longest
  Channel* channel = nullptr;
  std::uint64_t seq = 0;
  const char* op = "";  // a string literal
  char group[kGroupChars] = {};
  std::array<int, kMaxPeers> peers{};
  std::size_t peer_count = 0;
};

struct Tracker {
  std::mutex mutex;
  std::array<Entry, kSlots> slots;
  Entry last;  // the one left most recently (busy false; ticket 0: none yet)
  std::uint64_t tickets = 0;
};

Tracker& tracker() {
  static Tracker* t = new Tracker;  // never destroyed: threads may leave while the process exits
  return *t;
}

// The calling thread's entered slots, newest last (-1: not tracked, all slots busy).
thread_local std::array<int, kMaxDepth> t_stack;
thread_local int t_depth = 0;

OperationPosition to_position(const Entry& e, bool active) {
  OperationPosition o;
  o.known = true;
  o.active = active;
  o.channel_id = e.channel ? e.channel->id() : 0;
  o.channel = e.channel ? e.channel->name() : std::string(e.group);
  o.seq = e.seq;
  o.op = e.op;
  o.peers.assign(e.peers.begin(), e.peers.begin() + static_cast<std::ptrdiff_t>(e.peer_count));
  return o;
}

}  // namespace

void enter_operation(Channel* channel, std::uint64_t seq, const char* op, const char* group,
                     const std::vector<int>& peers) {
  int slot = -1;
  {
    Tracker& t = tracker();
    std::lock_guard<std::mutex> lock(t.mutex);
    for (int i = 0; i < kSlots; ++i) {
      Entry& e = t.slots[static_cast<std::size_t>(i)];
      if (e.busy) continue;
      e.busy = true;
      e.ticket = ++t.tickets;
      e.channel = channel;
      e.seq = seq;
      e.op = op ? op : "";
      std::strncpy(e.group, group ? group : "", kGroupChars - 1);
      e.group[kGroupChars - 1] = '\0';
      // A group too large to list travels without its members (the others' channel counters
      // still name them).
      // Each peer once (a batch sends to and receives from the same neighbour).
      e.peer_count = 0;
      for (int peer : peers) {
        const auto end = e.peers.begin() + static_cast<std::ptrdiff_t>(e.peer_count);
        if (std::find(e.peers.begin(), end, peer) != end) continue;
        if (e.peer_count == kMaxPeers) {
          e.peer_count = 0;
          break;
        }
        e.peers[e.peer_count++] = peer;
      }
      slot = i;
      break;
    }
  }
  if (t_depth < kMaxDepth) t_stack[static_cast<std::size_t>(t_depth)] = slot;
  ++t_depth;
  notify_position_listener();
}

void leave_operation() {
  if (t_depth == 0) return;
  --t_depth;
  if (t_depth >= kMaxDepth) return;
  const int slot = t_stack[static_cast<std::size_t>(t_depth)];
  if (slot < 0) return;
  {
    Tracker& t = tracker();
    std::lock_guard<std::mutex> lock(t.mutex);
    Entry& e = t.slots[static_cast<std::size_t>(slot)];
    e.busy = false;
    t.last = e;
  }
  notify_position_listener();
}

OperationPosition current_operation() {
  Tracker& t = tracker();
  std::lock_guard<std::mutex> lock(t.mutex);
  const Entry* oldest = nullptr;
  for (const Entry& e : t.slots) {
    if (e.busy && (oldest == nullptr || e.ticket < oldest->ticket)) oldest = &e;
  }
  if (oldest != nullptr) return to_position(*oldest, true);
  if (t.last.ticket == 0) return OperationPosition{};
  return to_position(t.last, false);
}

}  // namespace hpctrain::runtime
