#pragma once
// `hpctrain plan`'s figures for a run, assembled from its config (the trainer's own parsers, the
// model built or counted, the data files opened for their sizes) or from size arguments, and
// optionally calibrated on a finished run: the compute plan, the memory plan, the check against
// the calibrating run and the int8 evaluation estimate. The arithmetic is the plan library's
// (plan/); this gathers its inputs. The command only parses options and prints (docs/PLAN.md).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/layout_search.hpp"
#include "hpctrain/plan/memory_plan.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/plan/size_arguments.hpp"

namespace hpctrain::train {

/// What `hpctrain plan` was asked (docs/PLAN.md lists the options).
struct PlanRequest {
  std::string config;                  ///< --config; empty: size arguments (or --calibrate's)
  std::vector<std::string> overrides;  ///< --set
  /// The model's size (without --config) and the work (with or without it).
  plan::SizeArguments sizes;
  int devices = 0;  ///< 0: the calibrating run's, else 1
  std::string peak_flops;
  double utilization = 0.4;
  double eval_utilization = 0;
  std::string ckpt_bandwidth = "1e9";
  double mtbf_hours = 0;
  std::string calibrate;  ///< a finished run directory
  std::string compress;   ///< "int8" or empty
  std::string device_memory;
  std::string host_base;
  std::string shard;         ///< --shard: none | optimizer | gradients | full; empty: the config's
  int devices_per_node = 8;  ///< --devices-per-node: tp stays within a node; "node" shard groups
};

/// parallel.pp > 1 in the config: the schedule whose bubble the plan predicts (docs/PIPELINE.md).
struct PipelinePlan {
  plan::PipelineShape shape;
  std::vector<int> stage_blocks;  ///< blocks per model stage (gpt only)
  /// The share of each step a stage waits for its neighbours: (pp-1)/(V m+pp-1).
  double bubble = 0;
  bool on() const { return shape.pp > 1; }
};

/// Everything `hpctrain plan` prints.
struct RunPlan {
  plan::ComputePlan compute;
  plan::MemoryPlan memory;
  /// With --device-memory: every layout tried and the least-communicating one that fits.
  std::optional<plan::LayoutSearch> layouts;
  plan::LayoutSearchInputs layout_inputs;  ///< what the search varied around
  PipelinePlan pipeline;                   ///< with parallel.pp > 1 in the config
  std::optional<plan::LedgerCalibration> calibration;
  /// How well the plan reproduces the calibrating run (with calibration), else empty.
  nlohmann::ordered_json check;
  /// The int8 evaluation estimate (--compress int8), else null.
  nlohmann::json int8;
  /// Every number, as `hpctrain plan --json` prints it.
  nlohmann::ordered_json json;
};

/// The plan of `request`. Throws ConfigError (exit 2) or DataError (exit 3) naming the option,
/// key or file. Local: no collective runs; every rank of a launcher computes the same plan.
RunPlan make_run_plan(const PlanRequest& request);

}  // namespace hpctrain::train
