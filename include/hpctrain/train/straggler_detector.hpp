#pragma once
// Straggler detection: every logging interval each rank's compute time (forward + backward +
// optimizer) and data-wait time per step are gathered on the control plane; a rank whose time
// exceeds the interval's median over the ranks by logging.straggler_threshold (and by more than a
// noise floor of 5% of the median step time) for logging.straggler_intervals intervals in a row
// is named: a warning (rank, host, which time, how much slower), a metrics.jsonl record of type
// "straggler" (mirrored to TensorBoard), and the ledger's "stragglers" section, which also keeps
// the spread (slowest over median) the run saw. The train records carry every rank's times
// ("rank_compute_s", "rank_data_wait_s") for the report page's per-rank chart.
// docs/OBSERVABILITY.md describes it.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::train {

class RunLog;

/// A rank named slow in one interval.
struct Straggler {
  int rank = 0;
  std::string which;       ///< "compute" or "data wait"
  double seconds = 0;      ///< its time per step
  double median = 0;       ///< the median over the ranks
  int intervals = 0;       ///< intervals in a row it has been slow
  bool named_now = false;  ///< the streak reached the count in this interval (warn once)
};

class StragglerDetector {
 public:
  /// `threshold` > 1, `intervals` >= 1. Local.
  StragglerDetector(double threshold, int intervals);

  /// One interval's per-rank times per step (every vector indexed by world rank) and the
  /// median step time: the ranks slow for `intervals` intervals in a row (the streak counts
  /// carry over calls). Local, pure but for the streaks.
  std::vector<Straggler> add(const std::vector<double>& compute,
                             const std::vector<double>& data_wait, double step_seconds);

  /// One step's compute and data-wait seconds on this rank, where they are known per step (host
  /// timing; on a GPU the device times are known per interval only). The interval's value of
  /// the rank is then the median of its steps, so a step or two that the operating system
  /// stretched (another process took the core) does not make a straggler. Local.
  void step(double compute_s, double data_wait_s);

  /// Gathers this rank's interval times per step over `world` (on rank 0), judges them, and on
  /// rank 0 warns and records each straggler in `log` at `step`; returns the fields for the
  /// interval's train record ("rank_compute_s", "rank_data_wait_s": every rank's seconds per
  /// step), empty off rank 0. Collective over `world`.
  nlohmann::ordered_json observe(std::int64_t step, double compute_per_step,
                                 double data_wait_per_step, double step_seconds,
                                 comm::ControlPlane& world, RunLog& log);

  /// The ledger's "stragglers" section: threshold, intervals, the largest and the median spread
  /// (slowest rank over the median) of compute and data wait, and the stragglers named. Local
  /// (meaningful on rank 0).
  nlohmann::ordered_json summary() const;

 private:
  double threshold_;
  int intervals_;
  std::vector<int> compute_streak_;
  std::vector<int> data_streak_;
  std::vector<double> compute_spreads_;
  std::vector<double> data_spreads_;
  std::vector<double> step_compute_;  // this rank's steps of the current interval
  std::vector<double> step_data_;
  std::vector<std::string> hosts_;  // rank 0: every rank's host, gathered at the first interval
  nlohmann::ordered_json named_ = nlohmann::ordered_json::array();
  bool gathered_hosts_ = false;
};

}  // namespace hpctrain::train
