#include "hpctrain/runtime/hang_attribution.hpp"

#include <algorithm>

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
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

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
  const std::string what = str(w.group, " ", w.op, " #", w.seq);
  std::vector<std::string> behind;  // descriptions of the ranks that have not entered
  std::vector<std::string> other;   // ranks in another collective at this number, or ahead
  std::vector<std::string> unknown;
  for (int member : w.members) {
    if (member == w.world_rank) continue;
    const RankPosition* p = find_rank(positions, member);
    if (p == nullptr || !p->known) {
      out.unknown.push_back(member);
      unknown.push_back(p ? describe_position(*p) : str("rank ", member));
      continue;
    }
    const ChannelPosition* c = p->find(w.channel_id);
    const std::uint64_t entered = c ? c->entered : 0;
    const bool silent = p->heard_ago_s > kFreshSeconds;
    if (entered >= w.seq && silent && (c->entered_op.empty() || c->entered_op == w.op)) {
      // It joined, then fell silent: stopped (SIGSTOP, a debugger), starved or cut off, so its
      // part of the collective never comes.
      out.silent.push_back(member);
      behind.push_back(str(describe_position(*p), "; it had entered ", w.op, " #", w.seq,
                           " and fell silent in it"));
      continue;
    }
    if (entered < w.seq) {
      out.not_entered.push_back(member);
      std::string last = c && c->entered > 0
                             ? str("its last ", w.channel, " collective: ", c->entered_op, " #",
                                   c->entered, c->completed >= c->entered ? ", completed" : "")
                             : str("it has entered no ", w.channel, " collective yet");
      behind.push_back(str(describe_position(*p), "; ", last));
    } else if (entered == w.seq && !c->entered_op.empty() && c->entered_op != w.op) {
      out.desynchronised.push_back(member);
      other.push_back(str("rank ", member, p->host.empty() ? "" : " on " + p->host, " entered ",
                          c->entered_op, " #", entered, " where rank ", w.world_rank, " entered ",
                          w.op, " #", w.seq));
    } else if (entered > w.seq && c->completed >= w.seq) {
      // It completed this number while this rank still waits in it: it matched another call.
      out.desynchronised.push_back(member);
      other.push_back(str("rank ", member, p->host.empty() ? "" : " on " + p->host,
                          " is ahead, at ", op_or_unknown(c->entered_op), " #", entered,
                          ", having completed #", w.seq, " that rank ", w.world_rank,
                          " still waits in"));
    }
  }
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
    text += str("every rank of the ", w.group,
                " group has entered it, so the collective itself is stuck (the network or the "
                "MPI/NCCL transport), not a rank");
  }
  out.text = text;
  return out;
}

}  // namespace hpctrain::runtime
