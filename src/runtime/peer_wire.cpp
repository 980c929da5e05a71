#include "hpctrain/runtime/peer_wire.hpp"

#include <algorithm>
#include <cstring>

namespace hpctrain::runtime::peer {
namespace {

// A position record's header on the wire, then `channel_count` WireChannels.
struct WirePosition {
  std::uint32_t rank = 0;
  std::uint32_t version = 0;
  std::int64_t step = 0;
  std::uint32_t in_phase_ms = 0;
  std::uint8_t phase = 0;
  std::uint8_t channel_count = 0;
  std::uint8_t flags = 0;  // kHasOperation: a WireOperation and its peers follow the channels
  std::uint8_t reserved = 0;
};
constexpr std::uint8_t kHasOperation = 1;
static_assert(sizeof(WirePosition) == kPositionHeaderBytes, "wire format");

bool same_channel(const WireChannel& a, const WireChannel& b) {
  return a.id == b.id && a.entered == b.entered && a.completed == b.completed &&
         a.entered_op == b.entered_op && a.completed_op == b.completed_op;
}

bool same_operation(const WireOperation& a, const WireOperation& b) {
  return a.channel_id == b.channel_id && a.seq == b.seq && a.op == b.op && a.channel == b.channel &&
         a.active == b.active;
}

std::size_t peers_on_wire(const PositionRecord& r) {
  return std::min<std::size_t>(r.peers.size(), static_cast<std::size_t>(kMaxWirePeers));
}

}  // namespace

bool PositionRecord::same_place(const PositionRecord& other) const {
  return rank == other.rank && step == other.step && phase == other.phase &&
         channels.size() == other.channels.size() &&
         std::equal(channels.begin(), channels.end(), other.channels.begin(), same_channel) &&
         has_operation == other.has_operation &&
         (!has_operation || (same_operation(operation, other.operation) && peers == other.peers));
}

Message make_message(MessageType type, int from, std::uint64_t token) {
  Message m;
  m.type = type;
  m.from = static_cast<std::uint32_t>(from);
  m.token = token;
  return m;
}

std::string encode(const Message& m, const std::string& payload) {
  std::string out(reinterpret_cast<const char*>(&m), sizeof m);
  out += payload;
  return out;
}

void encode_position(const PositionRecord& record, std::string& out) {
  WirePosition p;
  p.rank = static_cast<std::uint32_t>(record.rank);
  p.version = record.version;
  p.step = record.step;
  p.in_phase_ms = record.in_phase_ms;
  p.phase = record.phase;
  const std::size_t count =
      std::min<std::size_t>(record.channels.size(), static_cast<std::size_t>(kMaxWireChannels));
  p.channel_count = static_cast<std::uint8_t>(count);
  p.flags = record.has_operation ? kHasOperation : 0;
  out.append(reinterpret_cast<const char*>(&p), sizeof p);
  if (count > 0) {
    out.append(reinterpret_cast<const char*>(record.channels.data()), count * sizeof(WireChannel));
  }
  if (!record.has_operation) return;
  WireOperation o = record.operation;
  const std::size_t peers = peers_on_wire(record);
  o.peer_count = static_cast<std::uint8_t>(peers);
  out.append(reinterpret_cast<const char*>(&o), sizeof o);
  if (peers > 0) {
    out.append(reinterpret_cast<const char*>(record.peers.data()), peers * sizeof(std::int32_t));
  }
}

std::string encode_positions(int from, std::uint64_t token,
                             const std::vector<PositionRecord>& records) {
  std::string payload;
  for (const PositionRecord& r : records) encode_position(r, payload);
  Message m = make_message(kPositions, from, token);
  m.detail = static_cast<std::uint32_t>(payload.size());
  return encode(m, payload);
}

std::vector<PositionRecord> decode_positions(const char* payload, std::size_t size) {
  std::vector<PositionRecord> out;
  std::size_t at = 0;
  while (size - at >= sizeof(WirePosition)) {
    WirePosition p;
    std::memcpy(&p, payload + at, sizeof p);
    std::size_t length = sizeof p + p.channel_count * sizeof(WireChannel);
    if (length > size - at) break;  // malformed: drop the rest
    WireOperation o;
    if (p.flags & kHasOperation) {
      if (length + sizeof o > size - at) break;
      std::memcpy(&o, payload + at + length, sizeof o);
      length += sizeof o + o.peer_count * sizeof(std::int32_t);
      if (o.peer_count > kMaxWirePeers || length > size - at) break;
    }
    PositionRecord r;
    r.rank = static_cast<int>(p.rank);
    r.version = p.version;
    r.step = p.step;
    r.phase = p.phase;
    r.in_phase_ms = p.in_phase_ms;
    r.channels.resize(p.channel_count);
    if (p.channel_count > 0) {
      std::memcpy(r.channels.data(), payload + at + sizeof p,
                  p.channel_count * sizeof(WireChannel));
    }
    if (p.flags & kHasOperation) {
      r.has_operation = true;
      r.operation = o;
      r.peers.resize(o.peer_count);
      if (o.peer_count > 0) {
        std::memcpy(r.peers.data(), payload + at + length - o.peer_count * sizeof(std::int32_t),
                    o.peer_count * sizeof(std::int32_t));
      }
    }
    out.push_back(std::move(r));
    at += length;
  }
  return out;
}

void FrameReader::append(const char* data, std::size_t size) {
  if (used_ > 0 && used_ == pending_.size()) {
    pending_.clear();
    used_ = 0;
  }
  pending_.append(data, size);
}

FrameReader::Next FrameReader::next(Message& m, std::string& payload) {
  for (;;) {
    if (pending_.size() - used_ < sizeof(Message)) break;
    std::memcpy(&m, pending_.data() + used_, sizeof m);
    if (m.magic != kMagic || m.token != token_) {
      used_ += sizeof m;  // not a message of this job's monitor: skip it
      continue;
    }
    std::size_t length = 0;
    if (m.type == kPositions) {
      if (m.detail > kMaxPayload) return Next::kBroken;
      length = m.detail;
      if (pending_.size() - used_ < sizeof m + length) break;  // the rest comes later
    }
    payload.assign(pending_, used_ + sizeof m, length);
    used_ += sizeof m + length;
    return Next::kMessage;
  }
  // Keep only what is not yet a whole message.
  pending_.erase(0, used_);
  used_ = 0;
  return Next::kNeedMore;
}

}  // namespace hpctrain::runtime::peer
