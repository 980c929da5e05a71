#pragma once
// The windows of steps that observe a run: the timeline (logging.trace, trace_session.hpp) and
// LibTorch's operator profiler (logging.profile, profile_session.hpp), opened before a step and
// closed after one. Private to the train layer.

#include <cstdint>
#include <functional>

#include "hpctrain/train/train_config.hpp"
#include "profile_session.hpp"
#include "trace_session.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::train {

class StepObservers {
 public:
  /// `comm_slices_per_step`: the data-parallel communication slices of a step (one per bucket,
  /// three when sharded), for the trace's size estimate. Collective over `world` when the trace
  /// is on (TraceSession).
  StepObservers(const TrainConfig& cfg, std::int64_t comm_slices_per_step, int tp_size,
                comm::ControlPlane& world, int world_rank);
  /// Before step number `step` (1-based). Local.
  void before_step(std::int64_t step);
  /// After step number `step`; `settle` waits for a checkpoint write in flight before a trace is
  /// written. Collective over the world at the trace window's end.
  void after_step(std::int64_t step, const std::function<void()>& settle);
  /// End of training: windows still open are written. Collective over the world.
  void finish();

 private:
  comm::ControlPlane& world_;
  TraceSession trace_;
  ProfileSession profile_;
};

}  // namespace hpctrain::train
