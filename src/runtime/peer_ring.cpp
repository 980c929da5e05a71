#include "hpctrain/runtime/peer_ring.hpp"

#include <algorithm>

namespace hpctrain::runtime::peer {
namespace {

std::chrono::duration<double> seconds(double s) {
  return std::chrono::duration<double>(s);
}

}  // namespace

void Actions::append(Actions other) {
  for (Send& s : other.sends) sends.push_back(std::move(s));
  if (other.loss && !loss) loss = other.loss;
  dump_for_hang = dump_for_hang || other.dump_for_hang;
  dump_requested = dump_requested || other.dump_requested;
  if (other.abort_rank >= 0 && abort_rank < 0) {
    abort_rank = other.abort_rank;
    abort_code = other.abort_code;
  }
}

PeerRing::PeerRing(const Options& options, std::vector<int> link_peers, Clock::time_point now)
    : o_(options) {
  for (int peer : link_peers) links_.push_back(LinkState{peer, false, now});
  const auto n = static_cast<std::size_t>(std::max(o_.world_size, 1));
  peers_.assign(n, PeerState{});
  hang_seen_.assign(n, 0);
  dumped_seen_.assign(n, 0);
  request_seen_.assign(n, 0);
  last_sent_at_ = now - std::chrono::hours(1);
}

bool PeerRing::valid_origin(int from) const {
  return from >= 0 && from < o_.world_size && from != o_.world_rank;
}

void PeerRing::flood(Actions& out, const std::string& bytes, int except, int origin) const {
  for (int i = 0; i < link_count(); ++i) {
    const LinkState& l = links_[static_cast<std::size_t>(i)];
    if (i == except || l.finished || l.peer == origin) continue;
    out.sends.push_back(Send{i, bytes, false, false});
  }
}

void PeerRing::heard(int link, Clock::time_point now) {
  links_[static_cast<std::size_t>(link)].last_heard = now;
}

Actions PeerRing::take_positions(int link, const std::string& payload, Clock::time_point now) {
  std::vector<PositionRecord> newer;
  for (PositionRecord& r : decode_positions(payload.data(), payload.size())) {
    if (!valid_origin(r.rank)) continue;
    PeerState& p = peers_[static_cast<std::size_t>(r.rank)];
    if (p.known && r.version <= p.record.version) continue;  // old news: it stops here
    p.known = true;
    p.record = r;
    p.heard = now;
    newer.push_back(std::move(r));
  }
  Actions out;
  if (newer.empty()) return out;
  // On at once to the other neighbour, each record never back to the rank it describes.
  for (int i = 0; i < link_count(); ++i) {
    const LinkState& l = links_[static_cast<std::size_t>(i)];
    if (i == link || l.finished) continue;
    std::vector<PositionRecord> pass;
    for (const PositionRecord& r : newer) {
      if (r.rank != l.peer) pass.push_back(r);
    }
    if (!pass.empty())
      out.sends.push_back(Send{i, encode_positions(o_.world_rank, o_.token, pass), true, false});
  }
  return out;
}

Actions PeerRing::on_message(int link, const Message& m, const std::string& payload,
                             Clock::time_point now) {
  Actions out;
  const int from = static_cast<int>(m.from);
  LinkState& l = links_[static_cast<std::size_t>(link)];
  switch (m.type) {
    case kBye: l.finished = true; break;
    case kAbort:
      l.finished = true;
      if (static_cast<int>(m.subject) != o_.world_rank && !abort_noted_) {
        abort_noted_ = true;
        out.abort_rank = static_cast<int>(m.subject);
        out.abort_code = static_cast<int>(m.detail);
        flood(out, encode(m), link, static_cast<int>(m.subject));
        // The launcher now ends every rank: the connections it closes are no loss.
        for (LinkState& other : links_) other.finished = true;
      }
      break;
    case kLost:
      if (abort_noted_) break;  // a rank the launcher ended: the job ends on purpose
      out.loss = Loss{static_cast<int>(m.subject), from, m.detail, m.silent_ms / 1000.0};
      break;
    case kPositions: return take_positions(link, payload, now);
    case kHang:
      if (!valid_origin(from) || hang_seen_[static_cast<std::size_t>(from)]) break;
      hang_seen_[static_cast<std::size_t>(from)] = 1;
      flood(out, encode(m), link, from);
      if (hang_claim_ < 0 || from < hang_claim_) hang_claim_ = from;
      out.dump_for_hang = true;
      break;
    case kDumped:
      if (!valid_origin(from) || dumped_seen_[static_cast<std::size_t>(from)]) break;
      dumped_seen_[static_cast<std::size_t>(from)] = 1;
      flood(out, encode(m), link, from);
      ++dumps_seen_;
      break;
    case kDumpRequest:
      if (!valid_origin(from) || m.detail <= request_seen_[static_cast<std::size_t>(from)]) break;
      request_seen_[static_cast<std::size_t>(from)] = m.detail;
      flood(out, encode(m), link, from);
      out.dump_requested = true;
      break;
    default: break;  // heartbeats only refresh last_heard
  }
  return out;
}

Actions PeerRing::on_closed(int link) {
  Actions out;
  const LinkState& l = links_[static_cast<std::size_t>(link)];
  if (!l.finished) out.loss = Loss{l.peer, o_.world_rank, kClosed, 0};
  return out;
}

Actions PeerRing::on_position(PositionRecord own, Clock::time_point now) {
  Actions out;
  own.rank = o_.world_rank;
  const bool moved = !last_sent_ || !own.same_place(*last_sent_);
  const auto since = now - last_sent_at_;
  const bool beat_due = since >= seconds(o_.period_s);
  move_waiting_ = false;
  if (!beat_due && !(moved && since >= seconds(o_.min_gap_s))) {
    move_waiting_ = moved;
    return out;
  }
  own.version = ++version_;
  const std::string bytes = encode_positions(o_.world_rank, o_.token, {own});
  for (int i = 0; i < link_count(); ++i) {
    if (!links_[static_cast<std::size_t>(i)].finished)
      out.sends.push_back(Send{i, bytes, true, true});
  }
  last_sent_ = std::move(own);
  last_sent_at_ = now;
  return out;
}

Clock::time_point PeerRing::next_send(bool moved) const {
  return last_sent_at_ +
         std::chrono::duration_cast<Clock::duration>(seconds(moved ? o_.min_gap_s : o_.period_s));
}

void PeerRing::stalled(Clock::time_point now) {
  for (LinkState& l : links_) l.last_heard = now;
}

Actions PeerRing::check_silence(Clock::time_point now) const {
  Actions out;
  for (const LinkState& l : links_) {
    const double silent = std::chrono::duration<double>(now - l.last_heard).count();
    if (!l.finished && silent > o_.timeout_s) {
      out.loss = Loss{l.peer, o_.world_rank, kSilent, silent};
      break;
    }
  }
  return out;
}

Actions PeerRing::broadcast(const Message& m) const {
  Actions out;
  flood(out, encode(m), -1, -1);
  return out;
}

Actions PeerRing::announce_loss(const Loss& loss) const {
  Message m = make_message(kLost, o_.world_rank, o_.token);
  m.subject = static_cast<std::uint32_t>(loss.lost_rank);
  m.detail = loss.reason;
  m.silent_ms = static_cast<std::uint32_t>(std::min(loss.silent_s * 1000, 4e9));
  return broadcast(m);
}

int PeerRing::fresh_peers(Clock::time_point now, double fresh_s) const {
  int n = 0;
  for (int r = 0; r < static_cast<int>(peers_.size()); ++r) {
    const PeerState& p = peers_[static_cast<std::size_t>(r)];
    if (r != o_.world_rank && p.known &&
        std::chrono::duration<double>(now - p.heard).count() < fresh_s) {
      ++n;
    }
  }
  return n;
}

}  // namespace hpctrain::runtime::peer
