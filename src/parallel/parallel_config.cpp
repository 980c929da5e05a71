#include "hpctrain/parallel/parallel_config.hpp"

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {

const char* shard_mode_name(ShardMode mode) {
  switch (mode) {
    case ShardMode::kNone: return "none";
    case ShardMode::kOptimizer: return "optimizer";
    case ShardMode::kGradients: return "gradients";
    case ShardMode::kFull: return "full";
  }
  return "none";
}

namespace {

// The sharding keys. Like the pipeline keys, an absent key is not recorded, so the resolved
// config (and its hash in every checkpoint) of a run that does not set them is what it was; the
// old spelling shard_optimizer is read (and recorded) as before.
void read_shard_keys(ConfigSection& s, ParallelConfig& c) {
  const bool old_spelling = s.has("shard_optimizer");
  const bool old_value = s.get<bool>("shard_optimizer", false);
  if (s.has("shard")) {
    c.shard = s.get_choice<ShardMode>("shard", c.shard,
                                      {{"none", ShardMode::kNone},
                                       {"optimizer", ShardMode::kOptimizer},
                                       {"gradients", ShardMode::kGradients},
                                       {"full", ShardMode::kFull}});
    if (old_spelling && old_value && c.shard == ShardMode::kNone) {
      s.fail("shard_optimizer",
             "is true but parallel.shard is none: shard_optimizer is the old spelling of "
             "parallel.shard: optimizer; set only parallel.shard");
    }
  } else if (old_value) {
    c.shard = ShardMode::kOptimizer;
  }
  if (s.has("shard_group")) {
    const auto text = s.get<std::string>("shard_group", "dp");
    if (text == "dp") {
      c.shard_group = 0;
    } else if (text == "node") {
      c.shard_group = -1;
    } else {
      char* end = nullptr;
      const long n = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || n < 1) {
        s.fail("shard_group", str("is '", text,
                                  "': give dp (the whole data-parallel group), node (the ranks of "
                                  "one node) or a positive number of ranks"));
      }
      c.shard_group = static_cast<int>(n);
    }
  }
  if (s.has("reshard_after_forward")) {
    c.reshard_after_forward = s.get<bool>("reshard_after_forward", c.reshard_after_forward);
  }
  const std::vector<std::pair<std::string, ShardDtype>> dtypes{{"float32", ShardDtype::kFloat32},
                                                               {"bfloat16", ShardDtype::kBFloat16}};
  if (s.has("param_dtype")) c.param_dtype = s.get_choice("param_dtype", c.param_dtype, dtypes);
  if (s.has("reduce_dtype")) c.reduce_dtype = s.get_choice("reduce_dtype", c.reduce_dtype, dtypes);
  if (c.param_dtype != ShardDtype::kFloat32 && c.shard != ShardMode::kFull) {
    s.fail("param_dtype", str("is bfloat16 but parallel.shard is ", shard_mode_name(c.shard),
                              ": gathered bfloat16 copies exist with parallel.shard: full only; "
                              "use run.precision: bf16 for bfloat16 compute otherwise"));
  }
  if (c.reduce_dtype != ShardDtype::kFloat32 && c.shard < ShardMode::kGradients) {
    s.fail("reduce_dtype", str("is bfloat16 but parallel.shard is ", shard_mode_name(c.shard),
                               ": it sets the reduce-scatter precision of parallel.shard: "
                               "gradients or full"));
  }
}

}  // namespace

ParallelConfig ParallelConfig::from(ConfigSection& s) {
  ParallelConfig c;
  c.tp = s.get<int>("tp", c.tp);
  c.bucket_mb = s.get<double>("bucket_mb", c.bucket_mb);
  c.overlap = s.get<bool>("overlap", c.overlap);
  read_shard_keys(s, c);
  if (c.tp < 1) s.fail("tp", "must be a positive integer");
  if (c.bucket_mb < 0) s.fail("bucket_mb", "must be >= 0 (0: one bucket per parameter)");
  // Absent pipeline keys are not recorded: a config without them dumps (and hashes into
  // checkpoints) exactly as before pipelines existed.
  if (s.has("pp")) c.pp = s.get<int>("pp", c.pp);
  if (c.pp < 1) s.fail("pp", "must be a positive integer (1 turns pipeline parallelism off)");
  if (s.has("pp_schedule")) {
    c.pp_schedule = s.get_choice<plan::PipelineScheduleKind>(
        "pp_schedule", c.pp_schedule,
        {{"1f1b", plan::PipelineScheduleKind::kOneFOneB},
         {"gpipe", plan::PipelineScheduleKind::kGpipe},
         {"interleaved", plan::PipelineScheduleKind::kInterleaved}});
  }
  if (s.has("pp_virtual")) c.pp_virtual = s.get<int>("pp_virtual", c.pp_virtual);
  if (c.pp_virtual < 1) s.fail("pp_virtual", "must be a positive number of chunks per rank");
  if (c.pp_schedule == plan::PipelineScheduleKind::kInterleaved && c.pp_virtual < 2) {
    s.fail("pp_schedule", "interleaved needs parallel.pp_virtual >= 2 model chunks per rank");
  }
  if (c.pp_schedule != plan::PipelineScheduleKind::kInterleaved && c.pp_virtual != 1) {
    s.fail("pp_virtual", str("is ", c.pp_virtual,
                             " but only parallel.pp_schedule: interleaved runs several chunks per "
                             "rank; set pp_schedule: interleaved or pp_virtual: 1"));
  }
  if (c.pp_schedule == plan::PipelineScheduleKind::kInterleaved && c.pp < 2) {
    s.fail("pp_schedule",
           "interleaved needs parallel.pp >= 2: with one stage there is nothing "
           "to interleave");
  }
  if (c.pp > 1 && c.shard > ShardMode::kOptimizer) {
    s.fail("shard", str("is ", shard_mode_name(c.shard), " but parallel.pp is ", c.pp,
                        ": pipeline stages run with parallel.shard: none or optimizer"));
  }
  if (s.has("pp_layers")) c.pp_layers = s.get<std::vector<int>>("pp_layers", c.pp_layers);
  if (!c.pp_layers.empty()) {
    if (static_cast<int>(c.pp_layers.size()) != c.pipeline_stages()) {
      s.fail("pp_layers", str("lists ", c.pp_layers.size(),
                              " stages, but the pipeline has pp x "
                              "pp_virtual = ",
                              c.pipeline_stages(),
                              " model stages: give one block count per stage, in stage order"));
    }
    for (int n : c.pp_layers) {
      if (n < 1) s.fail("pp_layers", "every stage needs at least one block");
    }
  }
  return c;
}

ParallelConfig ParallelConfig::of(Config& config) {
  auto section = config.section("parallel");
  return from(section);
}

}  // namespace hpctrain::parallel
