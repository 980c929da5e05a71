#include "run_report.hpp"

#include <filesystem>
#include <fstream>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "run_files.hpp"

namespace hpctrain::train {
namespace {

std::string marker_path(const std::string& run_dir) {
  return run_dir + "/training_complete.json";
}

}  // namespace

RunReport::RunReport(bool rank0, const std::string& run_dir, ProgressMode progress,
                     std::int64_t total_steps, std::int64_t resume_step)
    : rank0_(rank0), run_dir_(run_dir), log_(rank0, run_dir, progress, total_steps, resume_step) {}

void RunReport::clear_completion() {
  if (!rank0_) return;
  std::error_code ec;
  std::filesystem::remove(marker_path(run_dir_), ec);
}

void RunReport::write_marker(std::int64_t step, const std::string& reason,
                             const std::string& last_checkpoint) {
  // The marker offline evaluation (--watch) waits for: no more checkpoints will come.
  const std::string problem = write_run_file(
      marker_path(run_dir_),
      nlohmann::json{{"step", step}, {"reason", reason}, {"last_checkpoint", last_checkpoint}}
              .dump() +
          "\n");
  if (!problem.empty()) log::warn(str("completion marker not written: ", problem));
}

void RunReport::finish(TrainOutcome& outcome, const PhaseSeconds& phases, const LedgerFacts& facts,
                       const std::string& last_checkpoint, comm::ControlPlane& world) {
  auto ledger = build_ledger(phases, facts, world);
  if (!rank0_) return;
  const std::string problem = write_run_file(run_dir_ + "/ledger.json", ledger.dump(2) + "\n");
  if (!problem.empty()) {
    // The run trained and saved, but its account is missing: say so, and do not end with 0.
    log::warn(str("the compute ledger was not written: ", problem));
    outcome.reason += str("; ledger.json not written (", problem, ")");
  }
  log_.record({{"type", "end"}, {"step", outcome.steps}, {"reason", outcome.reason}});
  log_.line(str("stopped after step ", outcome.steps, ": ", outcome.reason));
  log_.line(ledger_summary(ledger));
  if (outcome.exit_code == 0) write_marker(outcome.steps, outcome.reason, last_checkpoint);
  // Training is complete (the marker says so), but the run's outputs are not: exit 1.
  if (!problem.empty() && outcome.exit_code == kExitOk) outcome.exit_code = kExitError;
}

void RunReport::finish_completed(std::int64_t step, const LedgerFacts& facts,
                                 const std::string& last_checkpoint) {
  if (!rank0_) return;
  std::error_code ec;
  if (!std::filesystem::exists(run_dir_ + "/ledger.json", ec)) {
    // The timings died with the job that trained; what the checkpoint knows is kept.
    nlohmann::ordered_json j;
    j["model"] = {{"name", facts.model_name},
                  {"task", task_name(facts.task)},
                  {"parameters", facts.parameters},
                  {"tokens_per_sample", facts.tokens_per_sample}};
    j["grid"] = {
        {"world_size", facts.world_size}, {"dp", facts.dp}, {"pp", facts.pp}, {"tp", facts.tp}};
    j["steps"] = step;
    j["samples_trained"] = facts.samples_trained;
    j["flops"] = {{"forward_per_sample", facts.forward_flops_per_sample},
                  {"train_per_sample", 3.0 * facts.forward_flops_per_sample},
                  {"train_total", 3.0 * facts.forward_flops_per_sample *
                                      static_cast<double>(facts.samples_trained)}};
    j["reconstructed"] =
        str("the job that trained this run ended after its final checkpoint (step ", step,
            ") and before writing this ledger; it was rebuilt from that checkpoint by a restart, "
            "without the run's timings");
    const std::string problem = write_run_file(run_dir_ + "/ledger.json", j.dump(2) + "\n");
    if (!problem.empty()) log::warn(str("ledger not reconstructed: ", problem));
  }
  if (!std::filesystem::exists(marker_path(run_dir_), ec)) {
    log::info(
        str("writing the completion marker the run's last job did not write (step ", step, ")"));
    write_marker(step, "completed", last_checkpoint);
  }
}

}  // namespace hpctrain::train
