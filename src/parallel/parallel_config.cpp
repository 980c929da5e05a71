#include "hpctrain/parallel/parallel_config.hpp"

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {

ParallelConfig ParallelConfig::from(ConfigSection& s) {
  ParallelConfig c;
  c.tp = s.get<int>("tp", c.tp);
  c.bucket_mb = s.get<double>("bucket_mb", c.bucket_mb);
  c.overlap = s.get<bool>("overlap", c.overlap);
  c.shard_optimizer = s.get<bool>("shard_optimizer", c.shard_optimizer);
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
