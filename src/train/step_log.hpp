#pragma once
// What the loop reports after each step: the live progress line every step and, every
// logging.every_steps steps and at the last, a train record of the interval (loss, accuracy,
// throughput, resources, samples per source of a mixture) reduced over the dp group. Private to
// the train layer.

#include <cstdint>

#include "hpctrain/comm/environment.hpp"
#include "hpctrain/data/sampler.hpp"
#include "hpctrain/train/progress.hpp"
#include "hpctrain/train/straggler_detector.hpp"
#include "hpctrain/train/train_config.hpp"
#include "trainer_steps.hpp"

namespace hpctrain::runtime {
class ResourceMonitor;
}

namespace hpctrain::train {

class StepLog {
 public:
  struct Parts {
    RunLog& log;
    const TrainConfig& cfg;
    comm::Environment& env;
    const model::Model& model;
    const data::TrainSampler& sampler;
    runtime::ResourceMonitor& monitor;
    StepRunner& steps;
    StragglerDetector& stragglers;
    std::int64_t tokens_per_sample;
    std::int64_t global_batch;
    std::int64_t total_steps;
  };
  /// Intervals start at stream position `start`. Local.
  StepLog(Parts parts, const data::SamplerState& start) : p_(parts), interval_start_(start) {}

  /// The current step waited `seconds` for its data. Local.
  void data_wait(double seconds) {
    interval_.data_wait += seconds;
    last_wait_ = seconds;
  }
  /// The current step computed for `cpu_seconds` of the training thread's CPU time: with its data
  /// wait, one step of the straggler detector where steps are timed on the host. Local.
  void compute(double cpu_seconds) {
    if (p_.steps.host_timed()) p_.stragglers.step(cpu_seconds, last_wait_);
  }
  /// After `step` (its result, its StepClock seconds, the stream position after it): the live
  /// line, and at the end of an interval the phases' device times resolved into `phases` and the
  /// train record. Collective over the world at the end of an interval, else local.
  void after_step(std::int64_t step, const StepResult& r, double step_seconds,
                  const data::SamplerState& position, PhaseSeconds& phases);

 private:
  Parts p_;
  IntervalStats interval_;
  data::SamplerState interval_start_;  // per-source counts of the interval
  double last_wait_ = 0;               // the current step's data wait
  double compute_logged_ = 0;          // forward + backward + optimizer seconds at the last record
};

}  // namespace hpctrain::train
