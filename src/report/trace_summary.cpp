#include "hpctrain/report/trace_summary.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::report {
namespace {

using Interval = std::pair<double, double>;  // microseconds

// Sorted, merged intervals (their union).
std::vector<Interval> merge(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (!out.empty() && i.first <= out.back().second) {
      out.back().second = std::max(out.back().second, i.second);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

double length(const std::vector<Interval>& v) {
  double total = 0;
  for (const auto& i : v) total += i.second - i.first;
  return total;
}

// Length of the intersection of two unions of intervals, both merged.
double overlap(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (hi > lo) total += hi - lo;
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return total;
}

// The parts of merged `a` outside merged `b`.
std::vector<Interval> subtract(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  std::size_t j = 0;
  for (Interval i : a) {
    while (j < b.size() && b[j].second <= i.first) ++j;
    for (std::size_t k = j; k < b.size() && b[k].first < i.second; ++k) {
      if (b[k].first > i.first) out.emplace_back(i.first, b[k].first);
      i.first = std::max(i.first, b[k].second);
    }
    if (i.second > i.first) out.push_back(i);
  }
  return out;
}

std::vector<Interval> clip(const std::vector<Interval>& v, const Interval& window) {
  std::vector<Interval> out;
  for (const auto& i : v) {
    const double lo = std::max(i.first, window.first), hi = std::min(i.second, window.second);
    if (hi > lo) out.emplace_back(lo, hi);
  }
  return out;
}

struct Slice {
  std::string name;
  Interval span;
  std::int64_t step = -1;
};

}  // namespace

nlohmann::ordered_json summarize_trace(const std::string& run_dir) {
  const std::string path = run_dir + "/trace.json";
  runtime::require_regular_file_if_present(path, runtime::FileKind::kConfig, "trace file",
                                           "trace the run again (a FIFO would block the read)");
  std::ifstream in(path);
  if (!in) {
    throw ConfigError(str(path,
                          " not found: trace a run with logging.trace: {start_step: N, "
                          "steps: K} (docs/OBSERVABILITY.md)"));
  }
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("traceEvents") ||
      !doc["traceEvents"].is_array()) {
    throw DataError(str(path,
                        " is not a Trace Event Format file (no traceEvents array): it was "
                        "not written by hpctrain train, or was cut off; trace the run again"));
  }
  // Lane names per (rank, lane), then each rank's slices by lane kind.
  std::map<std::pair<int, int>, std::string> lanes;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "thread_name") {
      lanes[{e.value("pid", 0), e.value("tid", 0)}] = e["args"].value("name", "");
    }
  }
  std::map<int, std::vector<Slice>> main;
  std::map<int, std::vector<Interval>> comm;
  std::map<int, std::vector<Interval>> tp;  // tensor-parallel collectives: the caller waits
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int rank = e.value("pid", 0);
    const std::string lane = lanes[{rank, e.value("tid", 0)}];
    const double ts = e.value("ts", 0.0), dur = e.value("dur", 0.0);
    // A pipeline stage's lane holds its forwards and backwards: compute, like the main lane's.
    if (lane == "main" || lane.rfind("pipeline stage ", 0) == 0) {
      Slice s{e.value("name", ""), {ts, ts + dur}, -1};
      if (e.contains("args") && e["args"].contains("step"))
        s.step = e["args"]["step"].get<std::int64_t>();
      main[rank].push_back(s);
    } else if (lane.rfind("comm ", 0) == 0) {
      comm[rank].push_back({ts, ts + dur});
      if (lane == "comm tp") tp[rank].push_back({ts, ts + dur});
    }
  }
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::map<std::int64_t, std::vector<std::pair<double, int>>> by_step;  // step -> (ms, rank)
  for (auto& [rank, slices] : main) {
    const std::vector<Interval> comm_busy = merge(comm[rank]);
    const std::vector<Interval> tp_busy = merge(tp[rank]);
    for (const auto& step : slices) {
      if (step.name != "step") continue;
      double compute = 0, data_wait = 0, exposed = 0, bubble = 0;
      // forward and backward; all compute; the parameter-gather waits inside them
      std::vector<Interval> overlappable, computing, gather_waits;
      for (const auto& s : slices) {
        if (s.span.first < step.span.first || s.span.second > step.span.second) continue;
        const double d = s.span.second - s.span.first;
        if (s.name == "forward" || s.name == "backward" || s.name == "optimizer" ||
            s.name == "input copy") {
          compute += d;
          computing.push_back(s.span);
        }
        if (s.name == "forward" || s.name == "backward") overlappable.push_back(s.span);
        if (s.name == "data wait") data_wait += d;
        if (s.name == "pipeline wait") bubble += d;  // waiting for the neighbouring stages
        if (s.name == "gradient sync") exposed += d;
        // The sharded optimizer's parameter gather, waited for inside forward or the optimizer.
        if (s.name == "parameter gather wait") {
          compute -= d;
          exposed += d;
          gather_waits.push_back(s.span);
        }
      }
      const std::vector<Interval> step_comm = clip(comm_busy, step.span);
      const double total = step.span.second - step.span.first;
      // Tensor-parallel collectives run inside forward and backward, and those wait for them:
      // exposed communication, not compute, and not hidden behind backward.
      const double tp_wait = overlap(clip(tp_busy, step.span), merge(computing));
      compute -= tp_wait;
      exposed += tp_wait;
      // Gradient buckets hide behind backward, a sharded optimizer's parameter gather behind the
      // next forward, except while forward stands waiting for it.
      const double hidden =
          overlap(step_comm, subtract(subtract(merge(overlappable), tp_busy), merge(gather_waits)));
      rows.push_back({{"step", step.step},
                      {"rank", rank},
                      {"step_ms", total / 1000},
                      {"compute_ms", compute / 1000},
                      {"comm_ms", length(step_comm) / 1000},
                      {"hidden_ms", hidden / 1000},
                      {"exposed_ms", exposed / 1000},
                      {"tp_ms", tp_wait / 1000},
                      {"data_wait_ms", data_wait / 1000},
                      {"bubble_ms", bubble / 1000},
                      {"other_ms", (total - compute - exposed - data_wait - bubble) / 1000}});
      by_step[step.step].emplace_back(total / 1000, rank);
    }
  }
  if (rows.empty()) {
    throw DataError(str(path, " holds no step slices: the traced window saw no training step"));
  }
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a["step"].template get<std::int64_t>() != b["step"].template get<std::int64_t>()
               ? a["step"].template get<std::int64_t>() < b["step"].template get<std::int64_t>()
               : a["rank"].template get<int>() < b["rank"].template get<int>();
  });
  nlohmann::ordered_json stragglers = nlohmann::ordered_json::array();
  for (auto& [step, times] : by_step) {
    const auto slowest = *std::max_element(times.begin(), times.end());
    const auto fastest = *std::min_element(times.begin(), times.end());
    stragglers.push_back({{"step", step},
                          {"rank", slowest.second},
                          {"step_ms", slowest.first},
                          {"spread_ms", slowest.first - fastest.first}});
  }
  return {{"rows", rows}, {"stragglers", stragglers}};
}

std::string trace_summary_text(const nlohmann::ordered_json& summary, const std::string& run_dir) {
  std::string out = str("trace summary of ", run_dir,
                        "/trace.json (milliseconds; step = compute + exposed comm + data wait + "
                        "bubble + other; comm: communication lanes busy, hidden: of that, behind "
                        "forward and backward; tp: tensor-parallel collectives, part of "
                        "exposed; bubble: pipeline stages waiting for their neighbours)\n");
  char line[256];
  std::snprintf(line, sizeof line, "%6s %5s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "step", "rank",
                "step", "compute", "comm", "hidden", "exposed", "tp", "data wait", "bubble",
                "other");
  out += line;
  for (const auto& r : summary["rows"]) {
    std::snprintf(
        line, sizeof line, "%6lld %5d %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n",
        static_cast<long long>(r["step"].get<std::int64_t>()), r["rank"].get<int>(),
        r["step_ms"].get<double>(), r["compute_ms"].get<double>(), r["comm_ms"].get<double>(),
        r["hidden_ms"].get<double>(), r["exposed_ms"].get<double>(), r["tp_ms"].get<double>(),
        r["data_wait_ms"].get<double>(), r["bubble_ms"].get<double>(), r["other_ms"].get<double>());
    out += line;
  }
  for (const auto& s : summary["stragglers"]) {
    std::snprintf(line, sizeof line,
                  "step %lld: slowest rank %d (%.3f ms, %.3f ms more than the "
                  "fastest)\n",
                  static_cast<long long>(s["step"].get<std::int64_t>()), s["rank"].get<int>(),
                  s["step_ms"].get<double>(), s["spread_ms"].get<double>());
    out += line;
  }
  return out;
}

}  // namespace hpctrain::report
