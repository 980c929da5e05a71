#pragma once
// Where this rank is: the step, the phase of the step (data wait, forward, backward, ...) and, per
// collective channel, the sequence number and operation of the last collective it entered and the
// last it completed. The peer monitor carries every rank's position around its heartbeat ring
// (peer_monitor.hpp), so that a hang is attributed to the rank that holds the others up and what
// it is doing (watchdog.hpp), and the flight recorder writes it into its files
// (flight_recorder.hpp). Recording is a few relaxed atomic stores: cheap enough for every
// collective and every phase change.
//
// A channel is one process group's stream of collectives on one plane: "dp" (the data plane's
// Communicator) and "dp control" (the control plane) are separate channels over the same ranks,
// because the two are driven by different threads and only the order within one channel is the
// same on every rank. Collectives are numbered 1, 2, ... per channel in the order they are issued,
// so every member of a group agrees on the numbers.

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::runtime {

/// What a rank is doing. The numbers travel on the heartbeat: append, never renumber.
enum class Phase : std::uint8_t {
  kStartup = 0,         ///< before the training loop (opening files, building, resuming)
  kIdle = 1,            ///< between things: after the loop, or a command without phases
  kDataWait = 2,        ///< waiting for the next batch
  kForward = 3,         ///< forward and loss
  kBackward = 4,        ///< backward (and the gradient synchronisation it started)
  kOptimizer = 5,       ///< gradient norm, clipping, the update
  kStepEnd = 6,         ///< logging and the stop agreement after a step
  kEvaluation = 7,      ///< periodic evaluation
  kCheckpointSave = 8,  ///< writing a checkpoint
  kCheckpointLoad = 9,  ///< reading a checkpoint (resume)
};
constexpr int kPhaseCount = 10;

/// "data wait", "backward", ...; "unknown" for a number this binary does not know. Local.
const char* phase_name(Phase phase);
/// The phase named `name` (as phase_name writes it); kIdle when unknown. Local.
Phase phase_from_name(const std::string& name);

namespace position {
/// Sets the step this rank works on (training step numbers, 1 = the first). Local, lock-free.
void set_step(std::int64_t step);
/// Sets the phase and the time it started. Local, lock-free.
void set_phase(Phase phase);
/// The current step / phase / steady-clock nanoseconds since the phase began. Local.
std::int64_t step();
Phase phase();
std::int64_t phase_started_ns();
}  // namespace position

/// Sets a phase for a scope and restores the previous one after it. Local.
class PhaseScope {
 public:
  explicit PhaseScope(Phase phase);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase previous_;
};

/// The state of one channel at one moment (a copy; see Channel::snapshot).
struct ChannelState {
  std::string name;          ///< "dp", "dp control", ...
  std::string group;         ///< the group's name in messages: "dp"
  std::uint32_t id = 0;      ///< Channel::id()
  std::vector<int> members;  ///< world ranks, in group rank order
  std::uint64_t issued = 0;  ///< collectives issued (queued or run)
  std::uint64_t entered = 0;
  std::string entered_op;
  std::uint64_t completed = 0;
  std::string completed_op;
};

/// One channel's counters (see the file comment). Thread-safe; never destroyed.
class Channel {
 public:
  Channel(std::string group, std::string plane, std::vector<int> members);
  /// "dp" for the data plane, "dp control" for the control plane. Local.
  const std::string& name() const { return name_; }
  /// The group's name ("dp"). Local.
  const std::string& group() const { return group_; }
  /// A 32-bit hash of the name and the member ranks: equal on every member. Local.
  std::uint32_t id() const { return id_; }
  const std::vector<int>& members() const { return members_; }
  /// Numbers the next collective issued on this channel. Local, thread-safe.
  std::uint64_t issue() { return issued_.fetch_add(1, std::memory_order_relaxed) + 1; }
  /// Collective `seq` (`op`, a string literal) started / completed on this rank. Local.
  void enter(std::uint64_t seq, const char* op);
  void complete(std::uint64_t seq, const char* op);
  /// A consistent-enough copy for messages (each counter is read atomically). Local.
  ChannelState snapshot() const;
  /// The raw counters, for the heartbeat (no allocation). Local.
  std::uint64_t entered() const { return entered_.load(std::memory_order_relaxed); }
  std::uint64_t completed() const { return completed_.load(std::memory_order_relaxed); }
  const char* entered_op() const { return entered_op_.load(std::memory_order_relaxed); }
  const char* completed_op() const { return completed_op_.load(std::memory_order_relaxed); }

 private:
  std::string group_;
  std::string name_;
  std::vector<int> members_;
  std::uint32_t id_;
  std::atomic<std::uint64_t> issued_{0};
  std::atomic<std::uint64_t> entered_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<const char*> entered_op_{""};
  std::atomic<const char*> completed_op_{""};
};

/// The channel of group `group` on `plane` ("" for the data plane, "control" for the control
/// plane, or another tag) over the ranks of `comm`: created at its first use, then the same
/// object for the same name and ranks. Local (MPI_Comm_group and a rank translation; no
/// communication). Returns nullptr when MPI is not running.
Channel* channel(const std::string& group, const std::string& plane, MPI_Comm comm);
/// Every channel created so far, in creation order. Local, thread-safe.
std::vector<Channel*> channels();
/// The channel with `id`, or nullptr. Local, thread-safe.
Channel* channel_by_id(std::uint32_t id);

/// A short code for a collective's operation name (a 16-bit hash) for the heartbeat, and the name
/// of a code seen by this process ("" when unknown). Local, thread-safe.
std::uint16_t op_code(const char* op);
std::string op_name(std::uint16_t code);

/// The host name Slurm gives this node (SLURMD_NODENAME), else the processor name. Local.
std::string node_name(const std::string& host);

}  // namespace hpctrain::runtime
