#include "hpctrain/train/straggler_detector.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/progress.hpp"

namespace hpctrain::train {
namespace {

// A rank must also be slower than the median by this share of the median step time: a data wait
// of 0.3 ms against 0.1 ms is three times the median and means nothing.
constexpr double kNoiseFloor = 0.05;
constexpr std::size_t kHostChars = 64;

// The lower median: with an even count the faster of the two middle ranks, so that with two
// ranks the slow one is compared with the fast one, not with their mean.
double lower_median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

// The median of a rank's steps (the mean of the two middle ones for an even count).
double middle(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double rounded(double v) {
  return std::round(v * 1e6) / 1e6;  // microseconds: enough for a chart, short in the JSON
}

}  // namespace

StragglerDetector::StragglerDetector(double threshold, int intervals)
    : threshold_(threshold), intervals_(intervals) {}

std::vector<Straggler> StragglerDetector::add(const std::vector<double>& compute,
                                              const std::vector<double>& data_wait,
                                              double step_seconds) {
  std::vector<Straggler> out;
  const std::size_t n = compute.size();
  compute_streak_.resize(n, 0);
  data_streak_.resize(n, 0);
  const double floor = kNoiseFloor * step_seconds;
  auto judge = [&](const std::vector<double>& t, std::vector<int>& streak, const char* which) {
    const double median = lower_median(t);
    for (std::size_t r = 0; r < t.size(); ++r) {
      const bool slow = t[r] > threshold_ * median && t[r] - median > floor;
      streak[r] = slow ? streak[r] + 1 : 0;
      if (streak[r] >= intervals_) {
        out.push_back(Straggler{static_cast<int>(r), which, t[r], median, streak[r],
                                streak[r] == intervals_});
      }
    }
    return median;
  };
  const double compute_median = judge(compute, compute_streak_, "compute");
  const double data_median = judge(data_wait, data_streak_, "data wait");
  if (n > 0) {
    const double slowest = *std::max_element(compute.begin(), compute.end());
    if (compute_median > 0) compute_spreads_.push_back(slowest / compute_median);
    data_spreads_.push_back(*std::max_element(data_wait.begin(), data_wait.end()) - data_median);
  }
  return out;
}

void StragglerDetector::step(double compute_s, double data_wait_s) {
  step_compute_.push_back(compute_s);
  step_data_.push_back(data_wait_s);
}

nlohmann::ordered_json StragglerDetector::observe(std::int64_t step, double compute_per_step,
                                                  double data_wait_per_step, double step_seconds,
                                                  comm::ControlPlane& world, RunLog& log) {
  if (!step_compute_.empty()) {
    // The median step, not the mean: robust to the odd stretched step.
    compute_per_step = middle(step_compute_);
    data_wait_per_step = middle(step_data_);
    step_compute_.clear();
    step_data_.clear();
  }
  if (!gathered_hosts_) {
    char host[kHostChars] = {0};
    const runtime::Runtime* rt = runtime::Runtime::current();
    const std::string name = rt ? runtime::node_name(rt->host()) : std::string();
    std::strncpy(host, name.c_str(), kHostChars - 1);
    const auto all = world.gather_bytes(host, kHostChars, 0);
    for (std::size_t i = 0; i + kHostChars <= all.size(); i += kHostChars) {
      hosts_.emplace_back(reinterpret_cast<const char*>(all.data() + i));
    }
    gathered_hosts_ = true;
  }
  const double mine[2] = {compute_per_step, data_wait_per_step};
  const auto all = world.gather_bytes(mine, sizeof mine, 0);
  nlohmann::ordered_json fields = nlohmann::ordered_json::object();
  if (world.rank() != 0) return fields;
  std::vector<double> compute, data;
  for (std::size_t i = 0; i + sizeof mine <= all.size(); i += sizeof mine) {
    double v[2];
    std::memcpy(v, all.data() + i, sizeof v);
    compute.push_back(v[0]);
    data.push_back(v[1]);
  }
  const std::vector<Straggler> slow = add(compute, data, step_seconds);
  for (const Straggler& s : slow) {
    const std::string host =
        s.rank < static_cast<int>(hosts_.size()) ? hosts_[static_cast<std::size_t>(s.rank)] : "";
    const double ratio = s.median > 0 ? s.seconds / s.median : 0;
    if (s.named_now) {
      log::warn(str("straggler: rank ", s.rank, " (host ", host, ") spent ",
                    format_seconds(s.seconds), " per step in ", s.which, ", ",
                    str(std::round(ratio * 100) / 100), "x the median of the ranks (",
                    format_seconds(s.median), "), for ", s.intervals,
                    " logging intervals in a row (logging.straggler_threshold ", threshold_,
                    ", logging.straggler_intervals ", intervals_,
                    "); every collective waits for it. Check that rank's node: other processes, "
                    "CPU or GPU throttling, a slow disk or network"));
      named_.push_back({{"rank", s.rank},
                        {"host", host},
                        {"which", s.which},
                        {"step", step},
                        {"ratio", rounded(ratio)}});
    }
    log.record({{"type", "straggler"},
                {"step", step},
                {"rank", s.rank},
                {"host", host},
                {"which", s.which},
                {"seconds_per_step", rounded(s.seconds)},
                {"median_seconds_per_step", rounded(s.median)},
                {"ratio", rounded(ratio)},
                {"intervals", s.intervals},
                {"threshold", threshold_}});
  }
  // Seconds per step of every rank (names ending in _s: timings, as comparisons of runs treat
  // them), for the report page's per-rank chart.
  fields["rank_compute_s"] = nlohmann::ordered_json::array();
  fields["rank_data_wait_s"] = nlohmann::ordered_json::array();
  for (double v : compute) fields["rank_compute_s"].push_back(rounded(v));
  for (double v : data) fields["rank_data_wait_s"].push_back(rounded(v));
  return fields;
}

nlohmann::ordered_json StragglerDetector::summary() const {
  auto stats = [](std::vector<double> v) {
    if (v.empty()) return nlohmann::ordered_json{{"max", 0.0}, {"median", 0.0}};
    const double max = *std::max_element(v.begin(), v.end());
    return nlohmann::ordered_json{{"max", rounded(max)}, {"median", rounded(lower_median(v))}};
  };
  return {{"threshold", threshold_},
          {"intervals", intervals_},
          {"logged_intervals", compute_spreads_.size()},
          {"compute_spread", stats(compute_spreads_)},
          {"data_wait_excess_s", stats(data_spreads_)},
          {"named", named_}};
}

}  // namespace hpctrain::train
