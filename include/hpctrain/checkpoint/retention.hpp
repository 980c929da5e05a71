#pragma once
// Which committed checkpoints a run keeps: the newest `keep` by step, plus the best by the
// configured eval metric (stored in each manifest, so the best survives restarts), never the
// newest one and never one that is being loaded.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hpctrain::checkpoint {

/// What retention knows about one committed checkpoint.
struct RetentionCandidate {
  std::string path;
  std::int64_t step = 0;
  std::optional<double> metric;  ///< the manifest's metric, if the save had one
};

/// The retention policy.
struct RetentionPolicy {
  int keep = 2;                   ///< newest checkpoints kept (values below 1 count as 1)
  bool keep_best = true;          ///< also keep the best by metric
  bool higher_is_better = false;  ///< metric direction
};

/// The candidates to delete under `policy`: everything except the `keep` highest steps, the best
/// by metric (ties: the newest of them; checkpoints without a metric never count as best), and
/// any path in `protect` (the checkpoint being loaded). Order of `candidates` does not matter.
/// Local; pure.
std::vector<RetentionCandidate> select_for_deletion(std::vector<RetentionCandidate> candidates,
                                                    const RetentionPolicy& policy,
                                                    const std::vector<std::string>& protect);

}  // namespace hpctrain::checkpoint
