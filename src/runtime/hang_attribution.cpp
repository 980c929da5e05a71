#include "hpctrain/runtime/hang_attribution.hpp"

#include <algorithm>
#include <utility>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

// A rank heard from within this is alive as far as the heartbeats know (they come every second).
constexpr double kFreshSeconds = 3.0;

const RankPosition* find_rank(const std::vector<RankPosition>& positions, int world_rank) {
  for (const RankPosition& p : positions) {
    if (p.world_rank == world_rank) return &p;
  }
  return nullptr;
}

std::string op_or_unknown(const std::string& op) {
  return op.empty() ? std::string("a collective") : op;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> names;
  for (int world_rank : ranks) names.push_back(std::to_string(world_rank));
  return and_list(names);
}

// An operation's name without its qualifier ("allreduce (control)" -> "allreduce").
std::string bare_op(const std::string& op) {
  return op.substr(0, op.find(' '));
}

bool contains(const std::vector<int>& ranks, int world_rank) {
  return std::find(ranks.begin(), ranks.end(), world_rank) != ranks.end();
}

bool silent(const RankPosition& p) {
  return p.heard_ago_s > kFreshSeconds;
}

// The wait that names a rank: a collective (channel and number) or a point-to-point operation
// (channel_id 0; `channel` is the group) of `world_rank`.
struct Link {
  int world_rank = -1;
  std::uint32_t channel_id = 0;
  std::string channel;
  std::uint64_t seq = 0;
  std::string op;
};

// A collective that no member completes before every member has entered it (a rooted one, or a
// broadcast, may complete on some members first).
bool needs_every_member(const std::string& op) {
  const std::string name = bare_op(op);
  return name == "all_reduce" || name == "allreduce" || name == "all_gather" ||
         name == "allgather" || name == "reduce_scatter" || name == "barrier";
}

// Where `p` is relative to `link`, the wait that names it.
std::string relation(const Link& link, const RankPosition& p,
                     const std::vector<RankPosition>& positions) {
  if (link.channel_id != 0) {
    const ChannelPosition* c = p.find(link.channel_id);
    if (c != nullptr && c->entered >= link.seq && silent(p)) {
      return str("it had entered ", link.op, " #", link.seq, " and fell silent in it");
    }
    // The waiting rank completed the number before the waited one; when that collective needs
    // every member, `p` entered it too, whatever it was heard at: a rank stopped within the
    // ring's send gap of its last moves (or starved of the processor) never sent them.
    const RankPosition* waiter = find_rank(positions, link.world_rank);
    const ChannelPosition* w = waiter ? waiter->find(link.channel_id) : nullptr;
    const std::uint64_t heard = c ? c->entered : 0;
    if (w != nullptr && link.seq > 1 && w->completed == link.seq - 1 &&
        needs_every_member(w->completed_op) && heard < link.seq - 1) {
      return str("its last ", link.channel, " collective: ", w->completed_op, " #", link.seq - 1,
                 " or later (rank ", link.world_rank, " completed it, and no member completes an ",
                 w->completed_op, " before every member has entered it; ",
                 heard == 0 ? std::string("heard on none") : str("last heard at #", heard),
                 ": its latest moves had not gone out when it stopped)");
    }
    if (c == nullptr || c->entered == 0) {
      return str("it has entered no ", link.channel, " collective yet");
    }
    return str("its last ", link.channel, " collective: ", c->entered_op, " #", c->entered,
               c->completed >= c->entered ? ", completed" : "");
  }
  const OperationPosition& o = p.operation;
  if (o.known && o.active && o.channel_id == 0 && contains(o.peers, link.world_rank)) {
    return silent(p) ? str("it had entered ", describe_operation(o), " and fell silent in it")
                     : str("it is in ", describe_operation(o));
  }
  std::string out =
      str("it has not entered the ", link.channel, " ", link.op, " with rank ", link.world_rank);
  if (o.known && o.active) {
    out += silent(p) ? str("; it had entered ", describe_operation(o), " and fell silent in it")
                     : str("; it is in ", describe_operation(o));
  } else if (o.known) {
    out += str("; its last operation: ", describe_operation(o), ", completed");
  }
  return out;
}

// Following waits from rank to rank (attribute_hang).
struct Follow {
  const std::vector<RankPosition>& positions;
  std::vector<int> expanded;  // ranks described or followed already (by this or another path)
  std::vector<int> path;      // the ranks waiting on the current one, the reporting rank first
  HangAttribution& out;
};

// `world_rank`, named by `link`: described with where it is when it waits for nobody or fell
// silent (a cause), else followed to the ranks it waits for.
std::string follow(Follow& f, int world_rank, const Link& link) {
  const RankPosition* p = find_rank(f.positions, world_rank);
  if (p == nullptr || !p->known) {
    f.out.causes.push_back(world_rank);
    return p ? describe_position(*p)
             : str("rank ", world_rank, " (position unknown: nothing heard from it)");
  }
  f.expanded.push_back(world_rank);
  const std::vector<int> next = silent(*p) ? std::vector<int>{} : waits_for(*p, f.positions);
  if (next.empty()) {
    f.out.causes.push_back(world_rank);
    return str(describe_position(*p), "; ", relation(link, *p, f.positions));
  }
  f.out.waiting.push_back(world_rank);
  const OperationPosition& o = p->operation;
  const Link mine{world_rank, o.channel_id, o.channel, o.seq, o.op};
  std::string text = str("rank ", world_rank, ", which waits in ", describe_operation(o),
                         " at step ", p->step, " for ");
  f.path.push_back(world_rank);
  for (std::size_t i = 0; i < next.size(); ++i) {
    text += i == 0 ? "" : i + 1 == next.size() ? " and " : ", ";
    if (contains(f.path, next[i])) {
      text += str("rank ", next[i],
                  " (a cycle of waits between live ranks: a deadlock, not a stopped rank)");
    } else if (contains(f.expanded, next[i])) {
      text += str("rank ", next[i]);
    } else {
      text += follow(f, next[i], mine);
    }
  }
  f.path.pop_back();
  return text;
}

}  // namespace

std::vector<int> waits_for(const RankPosition& position,
                           const std::vector<RankPosition>& positions) {
  const OperationPosition& o = position.operation;
  std::vector<int> out;
  if (!o.known || !o.active) return out;
  if (o.channel_id == 0) {
    for (int peer : o.peers) {
      if (peer != position.world_rank && !contains(out, peer)) out.push_back(peer);
    }
    return out;
  }
  // The members: those heard on the channel, and the operation's peers (which include members
  // that have entered nothing on it yet).
  for (const RankPosition& q : positions) {
    if (q.world_rank == position.world_rank) continue;
    const ChannelPosition* c = q.known ? q.find(o.channel_id) : nullptr;
    if (c == nullptr && !contains(o.peers, q.world_rank)) continue;
    if (!q.known || (c ? c->entered : 0) < o.seq || silent(q)) out.push_back(q.world_rank);
  }
  return out;
}

std::string describe_operation(const OperationPosition& o) {
  const std::string channel = o.channel.empty() ? std::string() : o.channel + " ";
  if (o.channel_id != 0) return str(channel, op_or_unknown(o.op), " #", o.seq);
  std::string text = str(channel, o.op.empty() ? std::string("send_recv") : o.op);
  if (!o.peers.empty())
    text += str(" with rank", o.peers.size() > 1 ? "s " : " ", rank_list(o.peers));
  return text;
}

const ChannelPosition* RankPosition::find(std::uint32_t id) const {
  for (const ChannelPosition& c : channels) {
    if (c.id == id) return &c;
  }
  return nullptr;
}

std::string describe_position(const RankPosition& p) {
  std::string where = str("rank ", p.world_rank);
  if (!p.host.empty()) where += str(" on ", p.host);
  if (!p.known) return where + " (position unknown: nothing heard from it)";
  where += str(", which is in ", phase_name(p.phase), " at step ", p.step, " since ",
               format_seconds(p.in_phase_s + p.heard_ago_s));
  if (p.heard_ago_s > kFreshSeconds) {
    where += str(" (last heard ", format_seconds(p.heard_ago_s),
                 " ago: it stopped sending heartbeats, so it is stopped, starved or cut off)");
  } else {
    where += str(" (last heard ", format_seconds(p.heard_ago_s), " ago)");
  }
  return where;
}

HangAttribution attribute_hang(const WaitingCollective& w,
                               const std::vector<RankPosition>& positions) {
  HangAttribution out;
  const bool p2p = w.channel_id == 0;
  const std::string what = p2p ? str(w.group, " ", w.op) : str(w.group, " ", w.op, " #", w.seq);
  const Link link{w.world_rank, w.channel_id, p2p ? w.group : w.channel, w.seq, w.op};
  std::vector<int> behind_ranks;   // the members that hold it up, followed below
  std::vector<std::string> other;  // ranks in another collective at this number, or ahead
  std::vector<std::pair<int, std::string>> ahead;  // ranks that completed it
  std::vector<std::string> unknown;
  std::vector<int> seen;  // a batch lists a peer it sends to and receives from twice
  for (int member : w.members) {
    if (member == w.world_rank || contains(seen, member)) continue;
    seen.push_back(member);
    const RankPosition* p = find_rank(positions, member);
    if (p == nullptr || !p->known) {
      out.unknown.push_back(member);
      unknown.push_back(p ? describe_position(*p) : str("rank ", member));
      continue;
    }
    if (p2p) {
      // A peer in a point-to-point operation with this rank has entered it.
      const OperationPosition& o = p->operation;
      const bool in_it =
          o.known && o.active && o.channel_id == 0 && contains(o.peers, w.world_rank);
      if (in_it && !silent(*p)) continue;
      (in_it ? out.silent : out.not_entered).push_back(member);
      behind_ranks.push_back(member);
      continue;
    }
    const ChannelPosition* c = p->find(w.channel_id);
    const std::uint64_t entered = c ? c->entered : 0;
    if (entered >= w.seq && silent(*p) && (c->entered_op.empty() || c->entered_op == w.op)) {
      // It joined, then fell silent: stopped (SIGSTOP, a debugger), starved or cut off, so its
      // part of the collective never comes.
      out.silent.push_back(member);
      behind_ranks.push_back(member);
      continue;
    }
    if (entered < w.seq) {
      out.not_entered.push_back(member);
      behind_ranks.push_back(member);
    } else if (entered == w.seq && !c->entered_op.empty() && c->entered_op != w.op) {
      out.desynchronised.push_back(member);
      other.push_back(str("rank ", member, p->host.empty() ? "" : " on " + p->host, " entered ",
                          c->entered_op, " #", entered, " where rank ", w.world_rank, " entered ",
                          w.op, " #", w.seq));
    } else if (entered > w.seq && c->completed >= w.seq) {
      // It completed this number while this rank still waits in it: it matched another call.
      ahead.emplace_back(
          member, str("rank ", member, p->host.empty() ? "" : " on " + p->host, " is ahead, at ",
                      op_or_unknown(c->entered_op), " #", entered, ", having completed #", w.seq,
                      " that rank ", w.world_rank, " still waits in"));
    }
  }
  // Unless a member fell silent inside it: then the others complete as far as its part reached
  // them before it stopped (a ring or tree all-reduce finishes on some ranks first). Nor in a
  // rooted collective that a member has not entered: the others may finish their part (a
  // gather's senders) while the root waits for that member.
  const std::string op_name = bare_op(w.op);
  const bool rooted =
      op_name == "gather" || op_name == "reduce" || op_name == "broadcast" || op_name == "scatter";
  const bool ahead_is_normal = !out.silent.empty() || (rooted && !out.not_entered.empty());
  for (const auto& [member, text] : ahead_is_normal ? decltype(ahead){} : ahead) {
    out.desynchronised.push_back(member);
    other.push_back(text);
  }
  // Each member that holds it up: where it is, or the chain of waits from it to the causes.
  Follow f{positions, behind_ranks, {w.world_rank}, out};
  std::vector<std::string> behind;
  for (int member : behind_ranks) behind.push_back(follow(f, member, link));
  std::string text = str(what, " (step ", w.step, ") on rank ", w.world_rank,
                         w.host.empty() ? "" : " on " + w.host, ": ");
  if (!other.empty()) {
    text += "desynchronised program: ";
    for (std::size_t i = 0; i < other.size(); ++i) text += (i ? "; " : "") + other[i];
    text +=
        ": the ranks run different collectives at the same point (a collective inside a "
        "rank-dependent branch, or ranks that disagree on a step count)";
    if (!behind.empty()) text += "; ";
  }
  if (!behind.empty()) {
    text += str("waiting ", format_seconds(w.waited_s), " for ");
    if (behind.size() == 1) {
      text += behind[0];
    } else {
      text += str(behind.size(), " ranks: ");
      for (std::size_t i = 0; i < behind.size(); ++i) text += (i ? "; " : "") + behind[i];
    }
  }
  if (!unknown.empty()) {
    if (!behind.empty() || !other.empty()) text += "; ";
    text +=
        str("position unknown for rank", out.unknown.size() > 1 ? "s " : " ",
            rank_list(out.unknown), " (the peer monitor is off, or nothing was heard from them)");
  }
  if (behind.empty() && other.empty() && unknown.empty()) {
    text += p2p ? str("every peer is in it with this rank, so the operation itself is stuck (the "
                      "network or the MPI/NCCL transport), not a rank")
                : str("every rank of the ", w.group,
                      " group has entered it, so the collective itself is stuck (the network or "
                      "the MPI/NCCL transport), not a rank");
  }
  out.text = text;
  return out;
}

}  // namespace hpctrain::runtime
