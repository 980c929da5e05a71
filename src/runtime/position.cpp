#include "hpctrain/runtime/position.hpp"

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "hpctrain/runtime/mpi_check.hpp"
#include "position_listener.hpp"

namespace hpctrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

std::atomic<std::int64_t> g_step{0};
std::atomic<std::uint8_t> g_phase{static_cast<std::uint8_t>(Phase::kStartup)};
std::atomic<std::int64_t> g_phase_started{now_ns()};
std::atomic<void (*)()> g_listener{nullptr};

void moved() {
  if (auto* listener = g_listener.load(std::memory_order_acquire)) listener();
}

constexpr const char* kPhaseNames[kPhaseCount] = {
    "startup",   "idle",     "data wait",  "forward",         "backward",
    "optimizer", "step end", "evaluation", "checkpoint save", "checkpoint load"};

// FNV-1a: a stable hash every rank computes alike.
std::uint32_t fnv1a(const void* data, std::size_t size, std::uint32_t hash = 2166136261u) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 16777619u;
  }
  return hash;
}

struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<Channel>> channels;
  std::map<std::uint16_t, std::string> ops;
};

Registry& registry() {
  // Never destroyed: threads may record while the process exits.
  static Registry* r = [] {
    auto* reg = new Registry;
    // Every operation the communicators know, so that a code heard from another rank has a
    // name before this rank ran that operation itself.
    for (const char* op :
         {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "send", "recv",
          "allreduce (control)", "allgather (control)", "broadcast (control)", "gather (control)",
          "scatter (control)", "barrier (control)"}) {
      reg->ops[static_cast<std::uint16_t>(fnv1a(op, std::char_traits<char>::length(op)) & 0xffff)] =
          op;
    }
    return reg;
  }();
  return *r;
}

}  // namespace

const char* phase_name(Phase phase) {
  const auto i = static_cast<int>(phase);
  return i >= 0 && i < kPhaseCount ? kPhaseNames[i] : "unknown";
}

Phase phase_from_name(const std::string& name) {
  for (int i = 0; i < kPhaseCount; ++i) {
    if (name == kPhaseNames[i]) return static_cast<Phase>(i);
  }
  return Phase::kIdle;
}

namespace position {
void set_step(std::int64_t step) {
  if (g_step.exchange(step, std::memory_order_relaxed) != step) moved();
}
void set_phase(Phase phase) {
  if (g_phase.load(std::memory_order_relaxed) == static_cast<std::uint8_t>(phase)) return;
  g_phase_started.store(now_ns(), std::memory_order_relaxed);
  g_phase.store(static_cast<std::uint8_t>(phase), std::memory_order_relaxed);
  moved();
}
std::int64_t step() {
  return g_step.load(std::memory_order_relaxed);
}
Phase phase() {
  return static_cast<Phase>(g_phase.load(std::memory_order_relaxed));
}
std::int64_t phase_started_ns() {
  return g_phase_started.load(std::memory_order_relaxed);
}
}  // namespace position

void set_position_listener(void (*listener)()) {
  g_listener.store(listener, std::memory_order_release);
}

void notify_position_listener() {
  moved();
}

PhaseScope::PhaseScope(Phase phase) : previous_(position::phase()) {
  position::set_phase(phase);
}

PhaseScope::~PhaseScope() {
  position::set_phase(previous_);
}

Channel::Channel(std::string group, std::string plane, std::vector<int> members)
    : group_(std::move(group)),
      name_(plane.empty() ? group_ : group_ + " " + plane),
      members_(std::move(members)) {
  std::uint32_t hash = fnv1a(name_.data(), name_.size());
  id_ = fnv1a(members_.data(), members_.size() * sizeof(int), hash);
}

void Channel::enter(std::uint64_t seq, const char* op) {
  entered_op_.store(op, std::memory_order_relaxed);
  entered_.store(seq, std::memory_order_release);
  moved();
}

void Channel::complete(std::uint64_t seq, const char* op) {
  // Operations of one channel complete in issue order; a late store never moves it back.
  std::uint64_t done = completed_.load(std::memory_order_relaxed);
  if (seq <= done) return;
  completed_op_.store(op, std::memory_order_relaxed);
  completed_.store(seq, std::memory_order_release);
  moved();
}

ChannelState Channel::snapshot() const {
  ChannelState s;
  s.name = name_;
  s.group = group_;
  s.id = id_;
  s.members = members_;
  s.issued = issued_.load(std::memory_order_relaxed);
  s.entered = entered_.load(std::memory_order_acquire);
  s.entered_op = entered_op_.load(std::memory_order_relaxed);
  s.completed = completed_.load(std::memory_order_acquire);
  s.completed_op = completed_op_.load(std::memory_order_relaxed);
  return s;
}

Channel* channel(const std::string& group, const std::string& plane, MPI_Comm comm) {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized || comm == MPI_COMM_NULL) return nullptr;
  int size = 0;
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> group_ranks(static_cast<std::size_t>(size));
  std::vector<int> world_ranks(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) group_ranks[static_cast<std::size_t>(i)] = i;
  MPI_Group mine = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  HPCTRAIN_MPI_CHECK(MPI_Comm_group(comm, &mine));
  HPCTRAIN_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  HPCTRAIN_MPI_CHECK(
      MPI_Group_translate_ranks(mine, size, group_ranks.data(), world, world_ranks.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  auto made = std::make_unique<Channel>(group, plane, std::move(world_ranks));
  // The name as a code a position can carry (operation_tracker.hpp): every rank names its
  // channels alike, so another rank's "dp" reads as "dp" here.
  op_code(made->name().c_str());
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& c : r.channels) {
    if (c->id() == made->id() && c->name() == made->name()) return c.get();
  }
  r.channels.push_back(std::move(made));
  return r.channels.back().get();
}

std::vector<Channel*> channels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<Channel*> out;
  for (const auto& c : r.channels) out.push_back(c.get());
  return out;
}

Channel* channel_by_id(std::uint32_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& c : r.channels) {
    if (c->id() == id) return c.get();
  }
  return nullptr;
}

std::uint16_t op_code(const char* op) {
  if (op == nullptr || *op == '\0') return 0;
  const auto code =
      static_cast<std::uint16_t>(fnv1a(op, std::char_traits<char>::length(op)) & 0xffff);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.ops.emplace(code, op);
  return code;
}

std::string op_name(std::uint16_t code) {
  if (code == 0) return "";
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.ops.find(code);
  return it == r.ops.end() ? std::string() : it->second;
}

std::string node_name(const std::string& host) {
  const char* slurm = std::getenv("SLURMD_NODENAME");
  return slurm != nullptr && *slurm != '\0' ? std::string(slurm) : host;
}

}  // namespace hpctrain::runtime
