#include "trainer_checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/data_parallel_strategy.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/optimizer.hpp"

namespace hpctrain::train {

std::vector<checkpoint::TensorRecord> state_records(model::Model& model,
                                                    parallel::DataParallelStrategy& dp,
                                                    Optimizer& optimizer, bool with_optimizer,
                                                    bool snapshot_buffers,
                                                    ShardedState* load_targets) {
  std::vector<checkpoint::TensorRecord> records;
  // Under full sharding the parameters are the owned float32 chunks: gathered for a save (a new
  // tensor the deferred copy may read), or loaded into a layout tensor and taken apart.
  torch::Tensor master = load_targets ? dp.parameter_load_target() : dp.master_parameters();
  if (load_targets) load_targets->parameters = master;
  for (const auto& e : dp.layout()) {
    records.push_back({"model/" + e.name,
                       master.defined() ? master.narrow(0, e.offset, e.numel).view(e.param.sizes())
                                        : e.param.detach(),
                       model.shard_info(e.name), e.name});
  }
  // Buffers (BatchNorm statistics of user models; the built-in models have none) are model state
  // too: saved under their state_dict names, from dp rank 0 like every replicated tensor.
  // The next step's forward updates them (parameters change only at the optimizer step, after
  // the deferred copy): a save takes them as of now.
  for (const auto& item : model.named_buffers(/*recurse=*/true)) {
    records.push_back({"model/" + item.key(),
                       snapshot_buffers ? item.value().clone() : item.value(),
                       model.shard_info(item.key()), item.key()});
  }
  if (!with_optimizer) return records;
  for (auto& [state_name, buffer] : optimizer.state()) {
    torch::Tensor layout;
    if (load_targets) {
      layout = dp.state_load_target(buffer);
      load_targets->state.emplace_back(buffer, layout);
    } else {
      // Sharded, a snapshot (not a live view): the deferred copy may read it while the step
      // updates.
      layout = dp.gather_state(buffer);
    }
    for (const auto& e : dp.layout()) {
      records.push_back({str("optimizer/", state_name, "/", e.name),
                         layout.narrow(0, e.offset, e.numel).view(e.param.sizes()),
                         model.shard_info(e.name), e.name});
    }
  }
  return records;
}

void drop_stage_copies(std::vector<checkpoint::TensorRecord>& records, const model::Model& model) {
  for (const model::StageCopy& copy : model.stage_copies()) {
    if (copy.primary) continue;
    // Its weights and every optimizer state of it ("model/wte.weight", "optimizer/exp_avg/...").
    records.erase(
        std::remove_if(records.begin(), records.end(),
                       [&](const checkpoint::TensorRecord& r) { return r.parameter == copy.name; }),
        records.end());
  }
}

void restore_sharded_state(ShardedState& targets, parallel::DataParallelStrategy& dp) {
  for (auto& [packed, full] : targets.state) dp.restore_state(full, packed);
  targets.state.clear();
  if (targets.parameters.defined()) dp.restore_parameters(targets.parameters);
  targets.parameters = torch::Tensor();
}

namespace {

// Seconds until the Slurm job's end time, from `squeue -h -j $SLURM_JOB_ID -o %e`
// ("2026-11-30T17:00:00", local time), or a negative value when unknown or unlimited.
double slurm_seconds_left() {
  const char* job = std::getenv("SLURM_JOB_ID");
  if (!job) return -1;
  std::string command = str("squeue -h -j ", job, " -o %e 2>/dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return -1;
  char line[128] = {0};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  pclose(pipe);
  if (!got) return -1;
  std::tm end{};
  if (!strptime(line, "%Y-%m-%dT%H:%M:%S", &end)) return -1;  // "N/A", "Unknown"
  end.tm_isdst = -1;
  const std::time_t end_time = std::mktime(&end);
  return std::difftime(end_time, std::time(nullptr));
}

}  // namespace

Deadline::Deadline(double time_limit_s, double margin_s, comm::ControlPlane& world)
    : margin_s_(margin_s) {
  // Only world rank 0 asks Slurm; the others pass -1, so the maximum is rank 0's answer.
  std::vector<double> left{time_limit_s > 0 ? time_limit_s : -1, -1};
  if (world.rank() == 0) left[1] = slurm_seconds_left();
  world.reduce(left, comm::ReduceOp::kMax);
  const double limit = left[0];
  const double slurm = left[1];
  double chosen = -1;
  if (limit > 0) {
    chosen = limit;
    source_ = "run.time_limit";
  }
  if (slurm > 0 && (chosen < 0 || slurm < chosen)) {
    chosen = slurm;
    source_ = "the Slurm job's time limit";
  }
  if (chosen > 0) {
    end_ = std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(
               std::chrono::duration<double>(chosen));
    log::info(str("wall-time budget: ", format_seconds(chosen), " (", source_,
                  "); the run saves and stops when less than the save time + ",
                  format_seconds(margin_s_), " remain"));
  }
}

std::optional<double> Deadline::seconds_left() const {
  if (!end_) return std::nullopt;
  return std::chrono::duration<double>(*end_ - std::chrono::steady_clock::now()).count();
}

bool Deadline::reached(double save_seconds) const {
  auto left = seconds_left();
  return left && *left < save_seconds + margin_s_;
}

}  // namespace hpctrain::train
