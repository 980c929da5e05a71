#include "hpctrain/plan/layout_search.hpp"

#include <algorithm>
#include <cmath>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {
namespace {

// Whether `a` is the better choice than `b`: fewer bytes sent (equal within rounding), then no
// recomputation (it costs a forward), the lower shard mode, the smaller tp, the larger shard
// group (less memory for the same bytes).
bool better(const LayoutCandidate& a, const LayoutCandidate& b) {
  const double ca = a.plan.comm.total();
  const double cb = b.plan.comm.total();
  if (std::abs(ca - cb) > 1e-9 * std::max(ca, cb)) return ca < cb;
  const MemoryInputs& x = a.plan.in;
  const MemoryInputs& y = b.plan.in;
  if (x.recompute != y.recompute) return x.recompute < y.recompute;
  if (x.mode() != y.mode()) return x.mode() < y.mode();
  if (x.tp != y.tp) return x.tp < y.tp;
  return x.group() > y.group();
}

// The shard groups tried for dp ranks: the whole group, a node's ranks, powers of two between.
std::vector<int> shard_groups(int dp, int node_dp_ranks) {
  std::vector<int> groups{dp};
  if (node_dp_ranks > 1 && node_dp_ranks < dp && dp % node_dp_ranks == 0) {
    groups.push_back(node_dp_ranks);
  }
  for (int s = 2; s < dp; s *= 2) {
    if (dp % s == 0 && s != node_dp_ranks) groups.push_back(s);
  }
  return groups;
}

nlohmann::ordered_json candidate_json(const LayoutCandidate& c) {
  const MemoryPlan& p = c.plan;
  const MemoryInputs& m = p.in;
  nlohmann::ordered_json j;
  j["settings"] = layout_settings(m);
  j["shard"] = shard_mode_name(m.mode());
  j["shard_group"] = m.group();
  j["node_group"] = c.node_group;
  j["dp"] = m.dp;
  j["tp"] = m.tp;
  if (m.decoder) j["recompute"] = recompute_name(m.recompute);
  j["bytes_per_parameter"] = p.run.total();
  j["parameters_per_device"] = m.parameters_per_device;
  j["state_bytes"] = p.state_bytes;
  j["activation_bytes"] = p.run_activation_bytes;
  j["gathered_bytes"] = p.gathered_bytes + p.gathered_gradient_bytes;
  j["bucket_in_flight_bytes"] = p.bucket_in_flight_bytes;
  j["peak_bytes"] = p.total_bytes;
  j["fits"] = p.fits();
  j["communication_bytes_per_step"] = {{"gather", p.comm.gather},
                                       {"reduce", p.comm.reduce},
                                       {"replicas", p.comm.replicas},
                                       {"tensor_parallel", p.comm.tensor_parallel},
                                       {"total", p.comm.total()}};
  return j;
}

}  // namespace

LayoutSearch search_layouts(const LayoutSearchInputs& inputs) {
  if (inputs.devices < 1 || inputs.pp < 1 || inputs.devices_per_node < 1 ||
      !(inputs.parameters > 0)) {
    throw ConfigError(
        "layout search: devices, pipeline stages, devices per node and parameters must be "
        "positive");
  }
  const MemoryInputs& run = inputs.run;
  std::vector<int> tps;
  if (inputs.vary_tp && run.decoder) {
    const std::int64_t mlp = run.shape.swiglu
                                 ? run.shape.ffn_width
                                 : static_cast<std::int64_t>(std::round(
                                       static_cast<double>(run.shape.width) * run.shape.mlp_ratio));
    for (int tp = 1; tp <= inputs.devices_per_node; ++tp) {
      if (inputs.devices_per_node % tp != 0 || inputs.devices % (tp * inputs.pp) != 0) continue;
      if (run.heads % tp != 0 || mlp % tp != 0) continue;
      tps.push_back(tp);
    }
  } else {
    tps.push_back(run.tp);
  }
  std::vector<RecomputeMode> recomputes{run.recompute};
  if (run.decoder) recomputes = {RecomputeMode::kNone, RecomputeMode::kBlock};

  LayoutSearch out;
  if (inputs.devices % (run.tp * inputs.pp) == 0) {
    const int dp = inputs.devices / (run.tp * inputs.pp);
    out.node_dp_ranks = std::min(dp, std::max(1, inputs.devices_per_node / (run.tp * inputs.pp)));
  }
  for (int tp : tps) {
    if (inputs.devices % (tp * inputs.pp) != 0) continue;
    const int dp = inputs.devices / (tp * inputs.pp);
    const int node_dp = std::max(1, inputs.devices_per_node / (tp * inputs.pp));
    for (auto mode :
         {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
      const std::vector<int> groups =
          mode == ShardMode::kNone ? std::vector<int>{dp} : shard_groups(dp, node_dp);
      for (int s : groups) {
        for (auto recompute : recomputes) {
          MemoryInputs in = run;
          in.tp = tp;
          in.dp = dp;
          in.parameters_per_device = inputs.parameters / (tp * inputs.pp);
          in.shard = false;
          in.shard_mode = mode;
          in.shard_ranks = mode == ShardMode::kNone ? 0 : s;
          in.recompute = recompute;
          LayoutCandidate c;
          c.plan = make_memory_plan(in, inputs.optimizer, inputs.device_memory, 0);
          c.node_group = mode != ShardMode::kNone && s == node_dp;
          out.candidates.push_back(c);
        }
      }
    }
  }
  for (int i = 0; i < static_cast<int>(out.candidates.size()); ++i) {
    const LayoutCandidate& c = out.candidates[static_cast<std::size_t>(i)];
    if (c.plan.fits() &&
        (out.chosen < 0 || better(c, out.candidates[static_cast<std::size_t>(out.chosen)]))) {
      out.chosen = i;
    }
    int& best = out.best_of_mode[static_cast<int>(c.plan.in.mode())];
    if (best < 0) {
      best = i;
      continue;
    }
    const LayoutCandidate& b = out.candidates[static_cast<std::size_t>(best)];
    const bool replace = c.plan.fits()
                             ? (!b.plan.fits() || better(c, b))
                             : (!b.plan.fits() && c.plan.total_bytes < b.plan.total_bytes);
    if (replace) best = i;
  }
  return out;
}

nlohmann::ordered_json layout_search_to_json(const LayoutSearch& search,
                                             const LayoutSearchInputs& inputs) {
  nlohmann::ordered_json j;
  j["device_memory"] = inputs.device_memory;
  j["devices"] = inputs.devices;
  j["devices_per_node"] = inputs.devices_per_node;
  j["layouts_tried"] = search.candidates.size();
  j["chosen"] = search.chosen < 0
                    ? nlohmann::ordered_json()
                    : candidate_json(search.candidates[static_cast<std::size_t>(search.chosen)]);
  nlohmann::ordered_json best;
  for (auto mode :
       {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients, ShardMode::kFull}) {
    const int i = search.best_of_mode[static_cast<int>(mode)];
    if (i >= 0)
      best[shard_mode_name(mode)] = candidate_json(search.candidates[static_cast<std::size_t>(i)]);
  }
  j["best_of_each_shard"] = best;
  return j;
}

}  // namespace hpctrain::plan
