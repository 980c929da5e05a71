// Pipeline schedules: the compute order of each rank (GPipe, 1F1B, interleaved 1F1B), lowered
// into the messages it needs, and their text forms.

#include "hpctrain/plan/pipeline_schedule.hpp"

#include <algorithm>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::plan {

const char* pipeline_schedule_name(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGpipe: return "gpipe";
    case PipelineScheduleKind::kOneFOneB: return "1f1b";
    case PipelineScheduleKind::kInterleaved: return "interleaved";
  }
  return "?";
}

PipelineScheduleKind parse_pipeline_schedule(const std::string& text, const std::string& what) {
  if (text == "gpipe") return PipelineScheduleKind::kGpipe;
  if (text == "1f1b") return PipelineScheduleKind::kOneFOneB;
  if (text == "interleaved") return PipelineScheduleKind::kInterleaved;
  throw ConfigError(str(what, " = '", text, "' is not a pipeline schedule: use gpipe, 1f1b or ",
                        "interleaved (with parallel.pp_virtual chunks per rank)"));
}

void validate_pipeline_shape(const PipelineShape& s) {
  if (s.pp < 1) {
    throw ConfigError(str("parallel.pp = ", s.pp,
                          " is not a valid pipeline size: it must be a positive integer (1 turns "
                          "pipeline parallelism off)"));
  }
  if (s.micro_batches < 1) {
    throw ConfigError(str("optim.grad_accumulation = ", s.micro_batches,
                          ": a pipeline needs at least one micro-batch per step"));
  }
  if (s.virtual_stages < 1) {
    throw ConfigError(str("parallel.pp_virtual = ", s.virtual_stages,
                          " must be a positive number of model chunks per pipeline rank"));
  }
  if (s.kind != PipelineScheduleKind::kInterleaved) {
    if (s.virtual_stages != 1) {
      throw ConfigError(str("parallel.pp_virtual = ", s.virtual_stages,
                            " needs parallel.pp_schedule", " = interleaved (",
                            pipeline_schedule_name(s.kind),
                            " runs one chunk per rank); set pp_schedule: interleaved or "
                            "pp_virtual: 1"));
    }
    return;
  }
  if (s.pp < 2) {
    throw ConfigError(
        "parallel.pp_schedule = interleaved needs parallel.pp >= 2: with one pipeline rank there "
        "is nothing to interleave; use parallel.pp_schedule: 1f1b or more pipeline ranks");
  }
  if (s.micro_batches % s.pp != 0) {
    throw ConfigError(str("parallel.pp_schedule = interleaved needs optim.grad_accumulation (",
                          s.micro_batches, " micro-batches) to be a multiple of parallel.pp = ",
                          s.pp, ": micro-batches enter the pipeline in groups of pp; use ",
                          (s.micro_batches / s.pp + 1) * s.pp, " micro-batches or 1f1b"));
  }
}

bool PipelineAction::is_send() const {
  return kind == PipelineActionKind::kSendActivation || kind == PipelineActionKind::kSendGradient;
}

std::string PipelineAction::text(int virtual_stages) const {
  const bool backward = kind == PipelineActionKind::kBackward ||
                        kind == PipelineActionKind::kSendGradient ||
                        kind == PipelineActionKind::kRecvGradient;
  std::string what = str(backward ? "B" : "F", micro_batch);
  if (virtual_stages > 1) what += str(".", chunk);
  switch (kind) {
    case PipelineActionKind::kForward:
    case PipelineActionKind::kBackward: return what;
    case PipelineActionKind::kSendActivation: return str("send act ", what, " -> ", peer);
    case PipelineActionKind::kRecvActivation: return str("recv act ", what, " <- ", peer);
    case PipelineActionKind::kSendGradient: return str("send grad ", what, " -> ", peer);
    case PipelineActionKind::kRecvGradient: return str("recv grad ", what, " <- ", peer);
  }
  return what;
}

namespace {

struct Compute {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;
};

// Megatron-LM's interleaved order: the k-th forward (or backward) of a rank runs chunk
// (k / pp) % V (backward: counted from the last chunk) of micro-batch (k / (pp V)) pp + k % pp,
// so micro-batches pass each chunk in groups of pp.
Compute interleaved_compute(int k, bool forward, const PipelineShape& s) {
  const int group = s.pp * s.virtual_stages;
  const int chunk = (k % group) / s.pp;
  Compute c;
  c.forward = forward;
  c.chunk = forward ? chunk : s.virtual_stages - 1 - chunk;
  c.micro_batch = (k / group) * s.pp + k % s.pp;
  return c;
}

// Forwards of rank `rank` before its first backward under interleaved 1F1B: each chunk after the
// first adds a group of pp micro-batches, and a rank runs two more per later rank (its batches
// meet the next rank's one iteration later, see build_interleaved). With a single group of
// micro-batches (m = pp) there is no steady phase: all forwards first keeps the bubble at the
// formula's, as Megatron-LM does.
int interleaved_warmup(const PipelineShape& s, int rank) {
  const int total = s.micro_batches * s.virtual_stages;
  if (s.micro_batches == s.pp) return total;
  return std::min((s.pp - rank - 1) * 2 + (s.virtual_stages - 1) * s.pp, total);
}

std::vector<Compute> compute_order(const PipelineShape& s, int rank) {
  std::vector<Compute> order;
  const int m = s.micro_batches;
  const int v = s.virtual_stages;
  const bool interleaved = s.kind == PipelineScheduleKind::kInterleaved;
  auto forward = [&](int k) {
    return interleaved ? interleaved_compute(k, true, s) : Compute{true, k, 0};
  };
  auto backward = [&](int k) {
    return interleaved ? interleaved_compute(k, false, s) : Compute{false, k, 0};
  };
  const int total = m * v;  // forwards (and backwards) of this rank
  if (s.forward_only) {
    for (int k = 0; k < total; ++k) order.push_back(forward(k));
    return order;
  }
  if (s.kind == PipelineScheduleKind::kGpipe) {
    for (int k = 0; k < total; ++k) order.push_back(forward(k));
    for (int k = 0; k < total; ++k) order.push_back(backward(k));
    return order;
  }
  // 1F1B: as many forwards as the ranks after this one need to fill the pipeline, then one forward
  // and one backward in turn, then the remaining backwards.
  const int warmup = interleaved ? interleaved_warmup(s, rank) : std::min(s.pp - rank - 1, total);
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(backward(k));
  return order;
}

}  // namespace

namespace {

// Appends one rank's actions: computes and the messages around them, in batches.
class RankBuilder {
 public:
  RankBuilder(const PipelineShape& shape, int rank, std::vector<PipelineAction>& out)
      : shape_(shape), rank_(rank), out_(out) {}

  int stage(const Compute& c) const { return c.chunk * shape_.pp + rank_; }
  bool first(const Compute& c) const { return stage(c) == 0; }
  bool last(const Compute& c) const { return stage(c) == shape_.stages() - 1; }

  void compute(const Compute& c) {
    PipelineAction a = action(c);
    a.kind = c.forward ? PipelineActionKind::kForward : PipelineActionKind::kBackward;
    out_.push_back(a);
    open_ = false;
  }
  /// The message `c` needs before it runs (its input, or its output's gradient), if any.
  void receive_for(const Compute& c) {
    if (c.forward && !first(c)) {
      message(PipelineActionKind::kRecvActivation, c, stage_rank(stage(c) - 1, shape_.pp));
    } else if (!c.forward && !last(c)) {
      message(PipelineActionKind::kRecvGradient, c, stage_rank(stage(c) + 1, shape_.pp));
    }
  }
  /// The message `c` sends once it ran (its output, or its input's gradient), if any.
  void send_of(const Compute& c) {
    if (c.forward && !last(c)) {
      message(PipelineActionKind::kSendActivation, c, stage_rank(stage(c) + 1, shape_.pp));
    } else if (!c.forward && !first(c)) {
      message(PipelineActionKind::kSendGradient, c, stage_rank(stage(c) - 1, shape_.pp));
    }
  }
  /// Ends the batch being built: the next message starts a new one.
  void end_batch() { open_ = false; }

 private:
  PipelineAction action(const Compute& c) const {
    PipelineAction a;
    a.micro_batch = c.micro_batch;
    a.chunk = c.chunk;
    a.stage = stage(c);
    return a;
  }
  void message(PipelineActionKind kind, const Compute& c, int peer) {
    PipelineAction a = action(c);
    a.kind = kind;
    a.peer = peer;
    a.joined = open_;
    out_.push_back(a);
    open_ = true;
  }

  const PipelineShape& shape_;
  int rank_;
  std::vector<PipelineAction>& out_;
  bool open_ = false;
};

// GPipe, 1F1B and every forward-only schedule: each compute receives what it needs just before it
// and sends what it made just after; the send after one compute and the receive before the next
// are posted together, so neither neighbour waits for the other to finish a send before it may
// receive (Megatron-LM's send_forward_recv_backward).
void build_in_order(const PipelineShape& shape, int rank, std::vector<PipelineAction>& out) {
  RankBuilder b(shape, rank, out);
  for (const Compute& c : compute_order(shape, rank)) {
    b.receive_for(c);
    b.compute(c);
    b.send_of(c);
  }
}

// Interleaved 1F1B, as Megatron-LM runs it: after the warm-up forwards, each iteration runs one
// forward and one backward and then posts one batch with both of their sends and the receives of
// the next forward and backward. Rank r's batch k then meets rank r + 1's batch k + 1 (and rank
// pp - 1's batch k meets rank 0's batch k - pp + 1), which is why the warm-up is two forwards
// longer per later rank.
void build_interleaved(const PipelineShape& shape, int rank, std::vector<PipelineAction>& out) {
  RankBuilder b(shape, rank, out);
  const int total = shape.micro_batches * shape.virtual_stages;
  std::vector<Compute> forwards, backwards;
  for (const Compute& c : compute_order(shape, rank))
    (c.forward ? forwards : backwards).push_back(c);
  const int warmup = interleaved_warmup(shape, rank);
  auto f = [&](int k) { return forwards[static_cast<std::size_t>(k)]; };
  auto bw = [&](int k) { return backwards[static_cast<std::size_t>(k)]; };
  b.receive_for(f(0));
  b.end_batch();
  for (int k = 0; k < warmup; ++k) {
    b.compute(f(k));
    b.send_of(f(k));
    if (k + 1 < total) b.receive_for(f(k + 1));
    if (k == warmup - 1) b.receive_for(bw(0));
    b.end_batch();
  }
  for (int k = 0; k < total - warmup; ++k) {
    b.compute(f(warmup + k));
    b.compute(bw(k));
    b.send_of(f(warmup + k));
    b.send_of(bw(k));
    if (warmup + k + 1 < total) b.receive_for(f(warmup + k + 1));
    if (k + 1 < total) b.receive_for(bw(k + 1));
    b.end_batch();
  }
  for (int k = total - warmup; k < total; ++k) {
    b.compute(bw(k));
    b.send_of(bw(k));
    if (k + 1 < total) b.receive_for(bw(k + 1));
    b.end_batch();
  }
}

}  // namespace

PipelineSchedule make_pipeline_schedule(const PipelineShape& shape) {
  validate_pipeline_shape(shape);
  PipelineSchedule schedule;
  schedule.shape = shape;
  schedule.ranks.resize(static_cast<std::size_t>(shape.pp));
  for (int rank = 0; rank < shape.pp; ++rank) {
    auto& actions = schedule.ranks[static_cast<std::size_t>(rank)];
    if (shape.kind == PipelineScheduleKind::kInterleaved && !shape.forward_only) {
      build_interleaved(shape, rank, actions);
    } else {
      build_in_order(shape, rank, actions);
    }
  }
  return schedule;
}

std::vector<int> pipeline_stage_blocks(int layers, int stages, const std::vector<int>& chosen) {
  if (stages < 1) throw ConfigError(str("a pipeline of ", stages, " stages is not valid"));
  if (stages > layers) {
    throw ConfigError(str("the pipeline has parallel.pp x parallel.pp_virtual = ", stages,
                          " model stages but model.layers = ", layers,
                          " blocks: every stage needs at least one block; use at most ", layers,
                          " stages (a smaller parallel.pp or parallel.pp_virtual) or more layers"));
  }
  if (!chosen.empty()) {
    if (static_cast<int>(chosen.size()) != stages) {
      throw ConfigError(str("parallel.pp_layers lists ", chosen.size(),
                            " stages, but the pipeline has ", stages,
                            " (parallel.pp x parallel.pp_virtual): give one block count per "
                            "stage, in stage order"));
    }
    int sum = 0;
    for (int n : chosen) {
      if (n < 1) {
        throw ConfigError("parallel.pp_layers: every stage needs at least one block");
      }
      sum += n;
    }
    if (sum != layers) {
      throw ConfigError(str("parallel.pp_layers sums to ", sum, " blocks but model.layers = ",
                            layers, ": the stages must hold every block once"));
    }
    return chosen;
  }
  std::vector<int> blocks(static_cast<std::size_t>(stages), layers / stages);
  const int extra = layers % stages;
  for (int s = 0; s < extra; ++s) blocks[static_cast<std::size_t>(stages - 1 - s)] += 1;
  return blocks;
}

double predicted_bubble_fraction(const PipelineShape& s) {
  const double idle = s.pp - 1;
  return idle / (static_cast<double>(s.virtual_stages) * s.micro_batches + idle);
}

std::string format_pipeline_actions(const PipelineSchedule& schedule) {
  std::string out;
  const int v = schedule.shape.virtual_stages;
  for (std::size_t rank = 0; rank < schedule.ranks.size(); ++rank) {
    out += str("rank ", rank, ":");
    bool first = true;
    for (const auto& a : schedule.ranks[rank]) {
      out += first ? " " : (a.joined ? " + " : " | ");
      out += a.text(v);
      first = false;
    }
    out += "\n";
  }
  return out;
}

}  // namespace hpctrain::plan
