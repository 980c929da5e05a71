#pragma once
// `hpctrain plan --device-memory`'s choice of layout (docs/PLAN.md, "Choosing a layout"): every
// shard mode, tensor-parallel size, shard group and recompute mode of a run on a fixed number of
// devices, each sized by the memory plan, and the one that fits with the fewest bytes sent per
// step. Pure arithmetic: no LibTorch, MPI or HDF5. Local.

#include <string>
#include <vector>

#include "hpctrain/plan/memory_plan.hpp"

namespace hpctrain::plan {

/// What the search varies around a run.
struct LayoutSearchInputs {
  /// The run as configured: its model, micro-batch, precision, dtypes and buckets are kept; its
  /// tp, dp, shard mode, group and recompute mode are what the search varies.
  MemoryInputs run;
  std::string optimizer;     ///< optimizer_state_bytes_per_parameter names
  double parameters = 0;     ///< logical parameters of the whole model
  int devices = 1;           ///< dp x tp x pp, kept
  int pp = 1;                ///< pipeline stages, kept
  int devices_per_node = 8;  ///< tp stays within a node; "node" shard groups
  double device_memory = 0;  ///< bytes of one device
  /// tp is varied for the gpt only (heads and MLP width divisible); other models keep run.tp.
  bool vary_tp = true;
};

/// One layout tried.
struct LayoutCandidate {
  /// Its memory plan: plan.in has tp, dp, shard mode, group and recompute mode set;
  /// plan.total_bytes is the peak, plan.comm the bytes sent per step, plan.fits() the verdict.
  MemoryPlan plan;
  bool node_group = false;  ///< S is the dp ranks of one node
};

/// Every layout tried, and the choice.
struct LayoutSearch {
  std::vector<LayoutCandidate> candidates;
  int chosen = -1;  ///< index of the choice; -1 when nothing fits
  /// Per ShardMode (indexed by its value): the least-communicating layout that fits, else the one
  /// with the smallest peak; -1 when the mode was not tried.
  int best_of_mode[4] = {-1, -1, -1, -1};
  int node_dp_ranks = 1;  ///< dp ranks on one node at the chosen tp (or the run's)
};

/// Tries every layout: shard mode none, optimizer, gradients, full; tp among the divisors of
/// devices_per_node that divide devices / pp (gpt: and the heads and the MLP width); shard group
/// S among the whole dp group, the dp ranks of one node and the powers of two between 2 and dp
/// that divide dp; recompute none and block (the gpt only; other models keep the run's). Picks
/// the layout that fits with the fewest bytes sent per step; ties go to no recomputation, then
/// the lower shard mode, the smaller tp, the larger shard group. Throws ConfigError for sizes
/// < 1. Local.
LayoutSearch search_layouts(const LayoutSearchInputs& inputs);

/// The search as JSON (`hpctrain plan --json`'s "layout"): the chosen layout's settings, bytes
/// per parameter, peak and communication, the best of each mode, the number of layouts tried.
/// Local.
nlohmann::ordered_json layout_search_to_json(const LayoutSearch& search,
                                             const LayoutSearchInputs& inputs);

}  // namespace hpctrain::plan
