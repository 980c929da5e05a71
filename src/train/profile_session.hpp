#pragma once
// logging.profile: LibTorch's operator-level profiler over a window of steps, with the schedule
// of PyTorch's profiler (wait until the window, `warmup` steps profiled and discarded, then the
// active steps), written per rank as a chrome trace RUN_DIR/profile/rank_<r>.json. Private to the
// train layer.

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>

#include "hpctrain/train/train_config.hpp"

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace hpctrain::train {

class ProfileSession {
 public:
  /// Off when `window.steps` is 0. Local.
  ProfileSession(const StepWindow& window, std::int64_t warmup, const std::string& run_dir,
                 int world_rank);
  ~ProfileSession();
  /// Before step number `step` (1-based): starts the warmup or the active recording. Local.
  void before_step(std::int64_t step);
  /// After step number `step`: ends the warmup, or writes the active steps' trace. Local.
  void after_step(std::int64_t step);
  /// Ends a recording still running (the run stopped inside the window) and writes it. Local.
  void finish();

 private:
  StepWindow window_;
  std::int64_t warmup_;
  std::string path_;
  std::ofstream discard_;  // the warmup's events go nowhere
  std::unique_ptr<torch::autograd::profiler::RecordProfile> recorder_;
  bool active_ = false;
};

}  // namespace hpctrain::train
