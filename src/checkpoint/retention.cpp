#include "hpctrain/checkpoint/retention.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace hpctrain::checkpoint {

std::vector<RetentionCandidate> select_for_deletion(std::vector<RetentionCandidate> candidates,
                                                    const RetentionPolicy& policy,
                                                    const std::vector<std::string>& protect) {
  std::sort(
      candidates.begin(), candidates.end(),
      [](const RetentionCandidate& a, const RetentionCandidate& b) { return a.step > b.step; });
  std::set<std::size_t> kept;
  const std::size_t keep = static_cast<std::size_t>(std::max(1, policy.keep));
  for (std::size_t i = 0; i < candidates.size() && i < keep; ++i) kept.insert(i);
  if (policy.keep_best) {
    std::optional<std::size_t> best;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const auto& m = candidates[i].metric;
      if (!m || !std::isfinite(*m)) continue;
      // Newest first, so only a strictly better metric replaces: ties keep the newest.
      if (!best || (policy.higher_is_better ? *m > *candidates[*best].metric
                                            : *m < *candidates[*best].metric)) {
        best = i;
      }
    }
    if (best) kept.insert(*best);
  }
  std::vector<RetentionCandidate> doomed;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (kept.count(i)) continue;
    if (std::find(protect.begin(), protect.end(), candidates[i].path) != protect.end()) continue;
    doomed.push_back(candidates[i]);
  }
  return doomed;
}

}  // namespace hpctrain::checkpoint
