// Checking and simulating a pipeline schedule: the rules every schedule must keep, a run with
// rendezvous messages (deadlock detection, makespan, bubble), and the timeline drawn from it.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {
namespace {

using Kind = PipelineActionKind;

bool is_compute(const PipelineAction& a) {
  return a.kind == Kind::kForward || a.kind == Kind::kBackward;
}

// The stage on the other side of a message, and the kind the other side posts.
std::pair<int, Kind> other_side(const PipelineAction& a) {
  switch (a.kind) {
    case Kind::kSendActivation: return {a.stage + 1, Kind::kRecvActivation};
    case Kind::kRecvActivation: return {a.stage - 1, Kind::kSendActivation};
    case Kind::kSendGradient: return {a.stage - 1, Kind::kRecvGradient};
    case Kind::kRecvGradient: return {a.stage + 1, Kind::kSendGradient};
    default: return {-1, a.kind};
  }
}

// The static rules; an empty string when all hold.
std::string check_rules(const PipelineSchedule& s) {
  const PipelineShape& shape = s.shape;
  const int pp = shape.pp;
  const int v = shape.virtual_stages;
  const int m = shape.micro_batches;
  const int last = shape.stages() - 1;
  if (static_cast<int>(s.ranks.size()) != pp) {
    return str("the schedule has ", s.ranks.size(), " ranks for pp = ", pp);
  }
  for (int rank = 0; rank < pp; ++rank) {
    // (kind, micro-batch, chunk) -> position in the list
    std::map<std::tuple<Kind, int, int>, int> seen;
    const auto& actions = s.ranks[static_cast<std::size_t>(rank)];
    for (int i = 0; i < static_cast<int>(actions.size()); ++i) {
      const PipelineAction& a = actions[static_cast<std::size_t>(i)];
      const std::string where = str("rank ", rank, ", action ", i, " (", a.text(v), ")");
      if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v) {
        return where + ": micro-batch or chunk out of range";
      }
      if (a.stage != a.chunk * pp + rank) return where + ": stage is not held by this rank";
      if (is_compute(a) != !a.is_message())
        return where + ": a compute with a peer, or a message without";
      if (is_compute(a) && a.joined) return where + ": a compute joined to a batch";
      if (a.is_message()) {
        const int other = other_side(a).first;
        if (other < 0 || other > last) return where + ": a message past the end of the model";
        if (a.peer == rank) return where + ": a rank would wait on itself";
        if (a.peer != stage_rank(other, pp)) return where + ": the peer does not hold the stage";
      }
      if (!seen.emplace(std::make_tuple(a.kind, a.micro_batch, a.chunk), i).second) {
        return where + ": appears twice";
      }
    }
    auto at = [&](Kind k, int mb, int c) {
      auto it = seen.find(std::make_tuple(k, mb, c));
      return it == seen.end() ? -1 : it->second;
    };
    for (int mb = 0; mb < m; ++mb) {
      for (int c = 0; c < v; ++c) {
        const int stage = c * pp + rank;
        const std::string what = str("rank ", rank, ", micro-batch ", mb, ", chunk ", c);
        const int f = at(Kind::kForward, mb, c);
        const int b = at(Kind::kBackward, mb, c);
        if (f < 0) return what + ": no forward";
        if (shape.forward_only != (b < 0)) {
          return what +
                 (shape.forward_only ? ": a backward in a forward-only schedule" : ": no backward");
        }
        if (b >= 0 && b < f) return what + ": the backward precedes its forward";
        const int ra = at(Kind::kRecvActivation, mb, c);
        const int sa = at(Kind::kSendActivation, mb, c);
        if ((stage > 0) != (ra >= 0) || (ra >= 0 && ra > f)) {
          return what + ": the input is not received (once) before the forward";
        }
        if ((stage < last) != (sa >= 0) || (sa >= 0 && sa < f)) {
          return what + ": the output is not sent (once) after the forward";
        }
        if (shape.forward_only) continue;
        const int rg = at(Kind::kRecvGradient, mb, c);
        const int sg = at(Kind::kSendGradient, mb, c);
        if ((stage < last) != (rg >= 0) || (rg >= 0 && rg > b)) {
          return what + ": the output's gradient is not received (once) before the backward";
        }
        if ((stage > 0) != (sg >= 0) || (sg >= 0 && sg < b)) {
          return what + ": the input's gradient is not sent (once) after the backward";
        }
      }
    }
  }
  return "";
}

// One posted message waiting for its other side.
struct Posted {
  int rank = 0;
  int index = 0;  // in the rank's list
  double time = 0;
};

}  // namespace

double PipelineSimulation::bubble_fraction(int rank) const {
  if (makespan <= 0) return 0;
  return 1.0 - busy[static_cast<std::size_t>(rank)] / makespan;
}

PipelineSimulation simulate_pipeline(const PipelineSchedule& s, double forward_units,
                                     double backward_units) {
  PipelineSimulation sim;
  sim.problem = check_rules(s);
  if (!sim.problem.empty()) return sim;
  const int pp = s.shape.pp;
  const int v = s.shape.virtual_stages;
  const auto n = static_cast<std::size_t>(pp);
  sim.busy.assign(n, 0);
  sim.peak_in_flight.assign(n, 0);
  std::vector<std::size_t> pos(n, 0);
  std::vector<double> clock(n, 0);
  std::vector<int> in_flight(n, 0);
  std::vector<bool> posted(n, false);
  // Completion time of each message action once matched (NaN until then).
  std::vector<std::vector<double>> done(n);
  for (std::size_t r = 0; r < n; ++r) done[r].assign(s.ranks[r].size(), std::nan(""));
  // Messages from one rank to another match in the order they are posted (as NCCL's do): per
  // ordered pair of ranks, the queue of sends and of receives not yet matched.
  std::map<std::pair<int, int>, std::pair<std::vector<Posted>, std::vector<Posted>>> channels;
  std::map<std::pair<int, int>, std::size_t> matched;

  auto batch_end = [&](std::size_t r) {
    std::size_t e = pos[r] + 1;
    while (e < s.ranks[r].size() && s.ranks[r][e].joined) ++e;
    return e;
  };
  auto match = [&](std::pair<int, int> key) -> std::string {
    auto& [sends, recvs] = channels[key];
    std::size_t& k = matched[key];
    for (; k < sends.size() && k < recvs.size(); ++k) {
      const Posted& a = sends[k];
      const Posted& b = recvs[k];
      const auto& send =
          s.ranks[static_cast<std::size_t>(a.rank)][static_cast<std::size_t>(a.index)];
      const auto& recv =
          s.ranks[static_cast<std::size_t>(b.rank)][static_cast<std::size_t>(b.index)];
      const auto [stage, kind] = other_side(send);
      if (recv.kind != kind || recv.stage != stage || recv.micro_batch != send.micro_batch) {
        return str("message ", k, " from rank ", a.rank, " to rank ", b.rank, " is sent as '",
                   send.text(v), "' but received as '", recv.text(v),
                   "': the two ranks order their messages differently");
      }
      const double t = std::max(a.time, b.time);
      done[static_cast<std::size_t>(a.rank)][static_cast<std::size_t>(a.index)] = t;
      done[static_cast<std::size_t>(b.rank)][static_cast<std::size_t>(b.index)] = t;
    }
    return "";
  };

  while (true) {
    bool progress = false;
    bool all_done = true;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& actions = s.ranks[r];
      while (pos[r] < actions.size()) {
        const PipelineAction& a = actions[pos[r]];
        if (!a.is_message()) {
          const bool forward = a.kind == Kind::kForward;
          const double start = clock[r];
          clock[r] += forward ? forward_units : backward_units;
          sim.busy[r] += clock[r] - start;
          sim.intervals.push_back({static_cast<int>(r), start, clock[r], a});
          if (!s.shape.forward_only) {
            in_flight[r] += forward ? 1 : -1;
            sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], in_flight[r]);
          }
          ++pos[r];
          progress = true;
          continue;
        }
        const std::size_t end = batch_end(r);
        if (!posted[r]) {
          posted[r] = true;
          progress = true;
          for (std::size_t i = pos[r]; i < end; ++i) {
            const PipelineAction& msg = actions[i];
            const Posted p{static_cast<int>(r), static_cast<int>(i), clock[r]};
            const auto key = msg.is_send() ? std::make_pair(static_cast<int>(r), msg.peer)
                                           : std::make_pair(msg.peer, static_cast<int>(r));
            (msg.is_send() ? channels[key].first : channels[key].second).push_back(p);
            sim.problem = match(key);
            if (!sim.problem.empty()) return sim;
          }
        }
        double finished = clock[r];
        bool complete = true;
        for (std::size_t i = pos[r]; i < end; ++i) {
          if (std::isnan(done[r][i])) {
            complete = false;
            break;
          }
          finished = std::max(finished, done[r][i]);
        }
        if (!complete) break;
        clock[r] = finished;
        pos[r] = end;
        posted[r] = false;
        progress = true;
      }
      if (pos[r] < actions.size()) all_done = false;
    }
    if (all_done) break;
    if (!progress) {
      std::string waits;
      for (std::size_t r = 0; r < n; ++r) {
        if (pos[r] >= s.ranks[r].size()) continue;
        waits += str(waits.empty() ? "" : "; ", "rank ", r, " waits in '",
                     s.ranks[r][pos[r]].text(v), "'");
      }
      sim.problem = "deadlock: " + waits;
      return sim;
    }
  }
  for (std::size_t r = 0; r < n; ++r) sim.makespan = std::max(sim.makespan, clock[r]);
  sim.deadlock_free = true;
  return sim;
}

std::string format_pipeline_timeline(const PipelineSchedule& schedule, int forward_units,
                                     int backward_units) {
  const PipelineSimulation sim = simulate_pipeline(schedule, forward_units, backward_units);
  if (!sim.deadlock_free) return "not runnable: " + sim.problem + "\n";
  const int v = schedule.shape.virtual_stages;
  const auto units = static_cast<std::size_t>(std::llround(sim.makespan));
  std::vector<std::vector<std::string>> cells(schedule.ranks.size(),
                                              std::vector<std::string>(units, "."));
  std::size_t width = 1;
  for (const auto& i : sim.intervals) {
    const std::string label = i.action.text(v);
    width = std::max(width, label.size());
    for (auto t = static_cast<std::size_t>(std::llround(i.start));
         t < static_cast<std::size_t>(std::llround(i.end)); ++t) {
      cells[static_cast<std::size_t>(i.rank)][t] = label;
    }
  }
  std::string out;
  for (std::size_t r = 0; r < cells.size(); ++r) {
    out += str("rank ", r, " |");
    for (const auto& c : cells[r]) out += " " + c + std::string(width - c.size(), ' ');
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  const PipelineShape& shape = schedule.shape;
  const double idle = sim.makespan - sim.busy[0];
  out += str("bubble ", idle, " of ", sim.makespan, " units per rank = ", sim.bubble_fraction(0),
             "; (pp-1)/(V m+pp-1) = ", shape.pp - 1, "/",
             shape.virtual_stages * shape.micro_batches + shape.pp - 1, " = ",
             predicted_bubble_fraction(shape), "\n");
  return out;
}

}  // namespace hpctrain::plan
