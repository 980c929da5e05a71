#pragma once
// `--batch-size auto`: the evaluation batch size with the best throughput that fits a memory
// budget. Powers of two are tried in increasing order on real batches of the evaluation data;
// each is timed (one warm-up batch, then at least two timed ones or a quarter second), and the
// whole job's throughput is predicted from the slowest rank's batch time and how many canonical
// batches the busiest rank gets. The search stops at the budget (activation memory measured as
// the growth of the process's peak resident memory, extrapolated linearly to the next size), at
// an out-of-memory error, at the number of samples, or once throughput has fallen clearly below
// the best for two sizes in a row.

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/runtime/precision.hpp"

namespace hpctrain::comm {
class ControlPlane;
}
namespace hpctrain::data {
class Dataset;
}
namespace hpctrain::model {
class Model;
}

namespace hpctrain::eval {

struct BatchSearchOptions {
  std::int64_t min_batch = 16;
  std::int64_t max_batch = std::int64_t{1} << 16;
  std::int64_t samples = 0;                ///< samples the evaluation covers (caps the batch size)
  std::uint64_t memory_budget = 0;         ///< bytes of activation memory per rank (0: no limit)
  Precision precision = Precision::kFp32;  ///< autocast, as the evaluation (EvalOptions)
  double seconds_per_size = 0.25;          ///< timed work per candidate (at least two batches)
};

/// One candidate tried.
struct BatchTrial {
  std::int64_t batch = 0;
  double batch_seconds = 0;        ///< one forward + loss, slowest rank
  double samples_per_second = 0;   ///< predicted for the whole evaluation, all ranks
  std::uint64_t memory_bytes = 0;  ///< measured activation memory, largest over ranks (CPU)
  std::string note;                ///< why the search stopped here, if it did
};

struct BatchSearchResult {
  std::int64_t chosen = 0;
  std::vector<BatchTrial> trials;
  std::string stop_reason;
};

/// Runs the search with `model` (already on its device, weights irrelevant) on the first samples
/// of `dataset`; every rank tries the same sizes and decisions are reduced over `world`, so all
/// ranks return the same choice. `dp` sizes the canonical batches per rank. Collective over the
/// world (and the tp group inside the forward passes).
BatchSearchResult search_batch_size(model::Model& model, data::Dataset& dataset,
                                    comm::ControlPlane& dp, comm::ControlPlane& world,
                                    const BatchSearchOptions& options);

/// Bytes of memory per rank the default budget allows: half of MemAvailable (/proc/meminfo)
/// divided by the ranks on this node. 0 when unknown. Local.
std::uint64_t default_memory_budget(int local_ranks);

/// The trials as a table for the log. Local.
std::string format_trials(const BatchSearchResult& result);

}  // namespace hpctrain::eval
