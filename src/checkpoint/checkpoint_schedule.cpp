#include "hpctrain/checkpoint/checkpoint_schedule.hpp"

#include "hpctrain/runtime/config.hpp"

namespace hpctrain::checkpoint {

CheckpointConfig CheckpointConfig::from(ConfigSection& s) {
  CheckpointConfig c;
  c.every_steps = s.get<std::int64_t>("every_steps", c.every_steps);
  c.every_minutes = s.get<double>("every_minutes", c.every_minutes);
  c.keep = s.get<int>("keep", c.keep);
  c.keep_best = s.get<bool>("keep_best", c.keep_best);
  c.at_end = s.get<bool>("at_end", c.at_end);
  c.background = s.get<bool>("background", c.background);
  if (c.every_steps < 0) s.fail("every_steps", "must be >= 0 (0: not by steps)");
  if (c.every_minutes < 0) s.fail("every_minutes", "must be >= 0");
  if (c.keep < 2) {
    s.fail("keep",
           "must be at least 2, so a complete checkpoint survives while the next is "
           "written");
  }
  return c;
}

const char* save_reason_name(SaveReason reason) {
  switch (reason) {
    case SaveReason::kNone: return "";
    case SaveReason::kInterval: return "interval";
    case SaveReason::kTime: return "time interval";
    case SaveReason::kStop: return "stop request";
    case SaveReason::kEnd: return "end of run";
  }
  return "";
}

CheckpointSchedule::CheckpointSchedule(const CheckpointConfig& config, std::int64_t last_saved_step)
    : config_(config), last_saved_step_(last_saved_step), last_save_time_(Clock::now()) {}

bool CheckpointSchedule::time_due() const {
  return config_.every_minutes > 0 &&
         std::chrono::duration<double>(Clock::now() - last_save_time_).count() >=
             config_.every_minutes * 60;
}

SaveReason CheckpointSchedule::reason(std::int64_t step, bool last_step, bool stop_requested,
                                      bool time_due) const {
  if (step == last_saved_step_) return SaveReason::kNone;
  if (stop_requested) return SaveReason::kStop;
  if (last_step && config_.at_end) return SaveReason::kEnd;
  if (config_.every_steps > 0 && step % config_.every_steps == 0) return SaveReason::kInterval;
  if (time_due) return SaveReason::kTime;
  return SaveReason::kNone;
}

void CheckpointSchedule::saved(std::int64_t step) {
  last_saved_step_ = step;
  last_save_time_ = Clock::now();
}

}  // namespace hpctrain::checkpoint
