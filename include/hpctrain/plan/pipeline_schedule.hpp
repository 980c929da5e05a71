#pragma once
// Pipeline schedules as data (docs/PIPELINE.md): for every rank of a pipeline of `pp` ranks, the
// ordered list of what it does in one optimizer step: forward or backward of micro-batch m on
// model chunk c, and the sends and receives of activations and their gradients between stages,
// grouped into batches that are posted together. The executor (parallel/pipeline_executor.hpp)
// runs the list; here it is computed, checked and simulated without a model, so every schedule is
// readable and testable alone. Pure: no LibTorch, MPI or HDF5. Everything here is local.
//
// Stages: the model is cut into S = pp x V stages (V chunks per rank, V > 1 only for the
// interleaved schedule). Rank r holds stages r, r + pp, r + 2 pp, ...: its chunk c is stage
// c x pp + r. Stage 0 takes the inputs; stage S - 1 computes the loss.

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::plan {

/// parallel.pp_schedule.
enum class PipelineScheduleKind {
  kGpipe,       ///< all forwards, then all backwards (m micro-batches of activations per rank)
  kOneFOneB,    ///< 1F1B: warm-up forwards, then one forward and one backward alternate
  kInterleaved  ///< 1F1B over V chunks per rank (Megatron-LM's interleaved schedule)
};

/// "gpipe", "1f1b", "interleaved". Local.
const char* pipeline_schedule_name(PipelineScheduleKind kind);
/// The inverse; throws ConfigError naming `what` and the choices. Local.
PipelineScheduleKind parse_pipeline_schedule(const std::string& text, const std::string& what);

/// What a schedule is computed for.
struct PipelineShape {
  int pp = 1;              ///< pipeline ranks
  int virtual_stages = 1;  ///< V: chunks per rank (interleaved only; 1 otherwise)
  int micro_batches = 1;   ///< m: optim.grad_accumulation
  PipelineScheduleKind kind = PipelineScheduleKind::kOneFOneB;
  bool forward_only = false;  ///< evaluation: forwards and activation messages only
  /// Model stages, pp x V. Local.
  int stages() const { return pp * virtual_stages; }
};

/// Checks a shape: pp >= 1, m >= 1, V >= 1 and V = 1 unless interleaved; interleaved needs
/// pp >= 2 and m a multiple of pp. Throws ConfigError naming the parallel.* / optim.* key and the
/// fix. Local.
void validate_pipeline_shape(const PipelineShape& shape);

enum class PipelineActionKind {
  kForward,
  kBackward,
  kSendActivation,  ///< this stage's output to the next stage
  kRecvActivation,  ///< the previous stage's output, this stage's input
  kSendGradient,    ///< the gradient of this stage's input, to the previous stage
  kRecvGradient     ///< the gradient of this stage's output, from the next stage
};

/// One action of one rank.
struct PipelineAction {
  PipelineActionKind kind = PipelineActionKind::kForward;
  int micro_batch = 0;
  int chunk = 0;  ///< this rank's chunk (0..V-1)
  int stage = 0;  ///< the model stage of that chunk (chunk x pp + rank); messages name the
                  ///< local side's stage
  int peer = -1;  ///< pp rank at the other end of a message; -1 for forward and backward
  /// A message posted in one batch with the message before it (both in flight together; the
  /// batch completes when all of its messages have). False for compute and for a batch's first.
  bool joined = false;

  bool is_message() const { return peer >= 0; }
  bool is_send() const;
  /// "F3.1" (forward of micro-batch 3, chunk 1; ".c" only when V > 1), "send act F3.1 -> 2",
  /// "recv grad B3.1 <- 2". Local.
  std::string text(int virtual_stages) const;
};

/// A per-rank list of actions for one step.
struct PipelineSchedule {
  PipelineShape shape;
  std::vector<std::vector<PipelineAction>> ranks;  ///< [pp rank] -> actions in order
};

/// Builds the schedule of `shape` (validated first). Local.
PipelineSchedule make_pipeline_schedule(const PipelineShape& shape);

/// The pp rank that holds model stage `stage`. Local.
inline int stage_rank(int stage, int pp) {
  return stage % pp;
}

/// How many of a model's `layers` blocks each of its `stages` stages holds, in stage order:
/// `chosen` (parallel.pp_layers) when given, else as even as the blocks allow, the last stages
/// taking one block more each when the blocks do not divide (under 1F1B stage s holds the
/// activations of up to pp - s micro-batches, so the last stages have the most room). Throws
/// ConfigError naming the keys and the fix when there are more stages than blocks or `chosen` does
/// not fit (one entry per stage, each at least 1, summing to `layers`). Local.
std::vector<int> pipeline_stage_blocks(int layers, int stages, const std::vector<int>& chosen = {});

/// What a step of the schedule does when a forward of one chunk takes `forward_units` and a
/// backward `backward_units` and messages take no time (a message completes once both sides
/// have posted it: the strictest rule, so a schedule that passes it passes buffered sends too).
struct PipelineSimulation {
  bool deadlock_free = false;
  std::string problem;       ///< why not: the first broken rule, or who waits on whom
  double makespan = 0;       ///< time units from the first action to the last
  std::vector<double> busy;  ///< [rank] compute time
  /// [rank] most chunk micro-batches whose activations are held at once (forwards not yet
  /// followed by their backward).
  std::vector<int> peak_in_flight;
  /// One compute interval: rank, start, end, the action.
  struct Interval {
    int rank = 0;
    double start = 0;
    double end = 0;
    PipelineAction action;
  };
  std::vector<Interval> intervals;
  /// The idle share of the step on `rank`: 1 - busy / makespan. Local.
  double bubble_fraction(int rank) const;
};

/// Checks every rule of a schedule (each stage's forward and backward of every micro-batch once,
/// on the rank that holds the stage, forward before backward, every input received before it is
/// used, every send matched by the receive on its peer in the same order with the same micro-batch
/// and stage, no rank messaging itself) and runs it with the timing above until every rank is done
/// or none can move (a deadlock). Local.
PipelineSimulation simulate_pipeline(const PipelineSchedule& schedule, double forward_units = 1,
                                     double backward_units = 2);

/// The bubble fraction the arithmetic predicts: (pp - 1) / (V m + pp - 1) for 1F1B and
/// interleaved (V = 1 for 1F1B) and for GPipe; (pp - 1) / (V m + pp - 1) as well for a forward-only
/// pass. Local.
double predicted_bubble_fraction(const PipelineShape& shape);

/// The schedule as text: one line per rank, its actions separated by " | ", messages of one batch
/// joined by " + ". Local.
std::string format_pipeline_actions(const PipelineSchedule& schedule);

/// The simulated timeline as text, one row per rank and one cell per time unit ("F3" forward of
/// micro-batch 3, "B3" its backward, with ".c" for chunk c when V > 1, "." idle), with the bubble
/// fraction against the formula underneath (docs/PIPELINE.md shows these). Local.
std::string format_pipeline_timeline(const PipelineSchedule& schedule, int forward_units = 1,
                                     int backward_units = 2);

}  // namespace hpctrain::plan
