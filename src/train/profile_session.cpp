#include "profile_session.hpp"

#include <torch/csrc/autograd/profiler_legacy.h>

#include <filesystem>

#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

ProfileSession::ProfileSession(const StepWindow& window, std::int64_t warmup,
                               const std::string& run_dir, int world_rank)
    : window_(window), warmup_(warmup) {
  if (window_.steps <= 0) return;
  path_ = str(run_dir, "/profile/rank_", world_rank, ".json");
}

ProfileSession::~ProfileSession() = default;

void ProfileSession::before_step(std::int64_t step) {
  if (window_.steps <= 0 || recorder_) return;
  if (warmup_ > 0 && step == window_.start_step - warmup_) {
    // Profiled but discarded, as PyTorch's schedule warms up: first-call costs stay out.
    discard_.open("/dev/null");
    recorder_ = std::make_unique<torch::autograd::profiler::RecordProfile>(discard_);
    active_ = false;
  } else if (step == window_.start_step) {
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    recorder_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path_);
    active_ = true;
  }
}

void ProfileSession::after_step(std::int64_t step) {
  if (!recorder_) return;
  if (!active_ && step == window_.start_step - 1) {
    recorder_.reset();  // the warmup ends; the active window starts with the next step
    discard_.close();
  } else if (active_ && step == window_.start_step + window_.steps - 1) {
    finish();
  }
}

void ProfileSession::finish() {
  if (!recorder_) return;
  recorder_.reset();  // writes the chrome trace
  if (active_) {
    log::info(str("operator profile of steps ", window_.start_step, "..",
                  window_.start_step + window_.steps - 1, " written to ", path_));
  }
  active_ = false;
}

}  // namespace hpctrain::train
