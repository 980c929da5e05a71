#include "hpctrain/checkpoint/checkpointer.hpp"

#include <chrono>
#include <filesystem>

#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/runtime/clock.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"

namespace hpctrain::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

using runtime::seconds_since;

}  // namespace

StepDecision decide_after_step(const CheckpointSchedule& schedule, std::int64_t step,
                               const comm::StopRequest& agreed, bool last_step, bool stop_save) {
  StepDecision d;
  d.collect = agreed.save_finished();
  d.save = schedule.reason(step, last_step, stop_save, agreed.save_due);
  return d;
}

Checkpointer::Checkpointer(std::unique_ptr<CheckpointManager> manager,
                           const CheckpointConfig& config, std::int64_t resumed_step,
                           double guessed_save_seconds, Content content)
    : manager_(std::move(manager)),
      schedule_(config, resumed_step),
      guessed_save_seconds_(guessed_save_seconds),
      content_(std::move(content)) {}

Checkpointer::~Checkpointer() = default;

void Checkpointer::contribute(comm::StopRequest& local) const {
  local.save_due = schedule_.time_due();
  local.save_pending = manager_->has_pending();
  local.save_writing = manager_->writing();
}

double Checkpointer::save_estimate() const {
  return manager_->last_save_seconds() > 0 ? manager_->last_save_seconds() : guessed_save_seconds_;
}

double Checkpointer::after_step(std::int64_t step, const comm::StopRequest& agreed, bool last_step,
                                bool stop_save) {
  const StepDecision d = decide_after_step(schedule_, step, agreed, last_step, stop_save);
  if (d.collect) {
    manager_->wait();  // returns at once: every rank's writer has finished
    record_committed();
  }
  if (d.save == SaveReason::kNone) return 0;
  const auto start = Clock::now();
  if (manager_->has_pending()) {  // save() would wait for it first anyway
    manager_->wait();
    record_committed();
  }
  save(step, d.save);
  return seconds_since(start);
}

void Checkpointer::save(std::int64_t step, SaveReason why) {
  const auto start = Clock::now();
  {
    runtime::PhaseScope phase(runtime::Phase::kCheckpointSave);
    runtime::trace::Scope traced(0, "checkpoint save", step);
    manager_->save(content_(step));
  }
  schedule_.saved(step);
  seconds_ += seconds_since(start);
  log::debug(str("checkpoint of step ", step, " (", save_reason_name(why), ") handed over in ",
                 format_seconds(manager_->last_blocking_seconds())));
  if (!manager_->has_pending()) record_committed();  // a synchronous save is committed
}

void Checkpointer::finish() {
  const auto start = Clock::now();
  manager_->wait();  // the last save is committed before the job reports its outcome
  seconds_ += seconds_since(start);
  record_committed();
}

void Checkpointer::record_committed() {
  const std::string& path = manager_->last_saved_path();
  if (path.empty() || path == recorded_path_) return;
  recorded_path_ = path;
  if (!record_) return;
  CommittedSave saved;
  saved.step = parse_step_dir_name(std::filesystem::path(path).filename())
                   .value_or(schedule_.last_saved_step());
  saved.path = path;
  saved.bytes = manager_->last_save_bytes();
  saved.save_seconds = manager_->last_save_seconds();
  saved.blocking_seconds = manager_->last_blocking_seconds();
  record_(saved);
}

}  // namespace hpctrain::checkpoint
