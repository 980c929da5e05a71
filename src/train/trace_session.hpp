#pragma once
// logging.trace: records the phases of a window of steps on every rank (runtime/trace.hpp) and
// writes them, on rank 0, as RUN_DIR/trace.json in the Trace Event Format (Perfetto,
// chrome://tracing): one process per rank, one thread per lane, timestamps on rank 0's clock.
// Private to the train layer.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hpctrain/train/train_config.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::train {

/// Slices per rank and step the size estimate assumes: the main lane's phases (3 per micro-batch
/// and 6 more), one per gradient bucket, and for tensor parallelism `tp_collectives` per step.
std::int64_t trace_slices_per_step(std::int64_t micro_batches, std::int64_t buckets,
                                   std::int64_t tp_collectives);
/// Bytes of trace.json the window would take (about 130 per slice). Local.
double trace_bytes_estimate(const StepWindow& window, int world_size, std::int64_t slices_per_step);

class TraceSession {
 public:
  /// With the window off, does nothing. Otherwise refuses (ConfigError, on every rank) a window
  /// whose estimated size exceeds `max_mb`, then measures each rank's clock offset to rank 0 over
  /// `world` (barrier exits, median of several rounds). Collective over `world` when on.
  TraceSession(const StepWindow& window, double max_mb, std::int64_t slices_per_step,
               std::string run_dir, comm::ControlPlane& world);
  /// Before running step number `step` (1-based): opens the window at its first step. Local.
  void before_step(std::int64_t step);
  /// After step number `step`: at the window's last step, calls `settle` (the trainer waits for a
  /// checkpoint write in flight, so that its slices end inside the window), closes the window and
  /// writes trace.json. Collective over `world` then (every rank reaches the same step).
  void after_step(std::int64_t step, comm::ControlPlane& world,
                  const std::function<void()>& settle);
  /// End of training: an open window (the run stopped inside it) is written. Collective.
  void finish(comm::ControlPlane& world);
  /// The path written, empty before. Local.
  const std::string& path() const { return path_; }

 private:
  void write(comm::ControlPlane& world);
  StepWindow window_;
  std::string run_dir_;
  double max_bytes_ = 0;
  double offset_ns_ = 0;  // this rank's steady clock minus rank 0's
  bool open_ = false;
  bool written_ = false;
  std::string path_;
};

}  // namespace hpctrain::train
