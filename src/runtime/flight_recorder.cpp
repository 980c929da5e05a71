#include "hpctrain/runtime/flight_recorder.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hpctrain/runtime/hang_attribution.hpp"
#include "hpctrain/runtime/json_string.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

enum RecordState : std::uint8_t { kQueued = 0, kStarted = 1, kCompleted = 2, kFailed = 3 };

// Every field is an atomic written with relaxed stores: the thread that issues, the thread that
// runs the operation and the thread that dumps may all touch one record, and a plain field would
// be a data race. On x86 a relaxed store is a plain move.
struct Record {
  std::atomic<std::int64_t> id{-1};
  std::atomic<Channel*> channel{nullptr};
  std::atomic<const char*> op{""};
  std::atomic<const char*> dtype{""};
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::int64_t> bytes{0};
  std::atomic<std::int64_t> enqueue_ns{0};
  std::atomic<std::int64_t> start_ns{0};
  std::atomic<std::int64_t> end_ns{0};
  std::atomic<std::uint8_t> state{kQueued};
  std::atomic<bool> device_timed{false};  // start and end from CUDA events
};

struct Ring {
  explicit Ring(std::size_t n) : capacity(n), records(new Record[n]) {}
  std::size_t capacity;
  std::unique_ptr<Record[]> records;
};

// A ring replaced by configure() is never freed: a thread may still hold a pointer into it.
std::atomic<Ring*> g_ring{new Ring(FlightRecorder::kDefaultRecords)};
std::atomic<std::int64_t> g_next{0};

struct DumpState {
  std::mutex mutex;  // one dump at a time; guards the fields below
  std::string directory;
  int world_rank = 0;
  std::string host;
  int pipe[2] = {-1, -1};
  std::atomic<bool> installed{false};
};

DumpState& dump_state() {
  static DumpState* s = new DumpState;  // never destroyed: dumps may come while the process ends
  return *s;
}

Record* find(std::int64_t id) {
  if (id < 0) return nullptr;
  Ring* ring = g_ring.load(std::memory_order_acquire);
  if (ring == nullptr || ring->capacity == 0) return nullptr;
  Record& r = ring->records[static_cast<std::size_t>(id) % ring->capacity];
  return r.id.load(std::memory_order_relaxed) == id ? &r : nullptr;
}

std::string number(double v) {
  char buffer[40];
  std::snprintf(buffer, sizeof buffer, "%.6f", v);
  return buffer;
}

std::string channel_fields(const ChannelPosition& c) {
  return str("\"id\": ", c.id, ", \"name\": ", json_quoted(c.name), ", \"entered\": ", c.entered,
             ", \"entered_op\": ", json_quoted(c.entered_op), ", \"completed\": ", c.completed,
             ", \"completed_op\": ", json_quoted(c.completed_op));
}

const char* state_name(std::uint8_t state) {
  switch (state) {
    case kStarted: return "started";
    case kCompleted: return "completed";
    case kFailed: return "failed";
    default: return "queued";
  }
}

// The file's text. Times are Unix seconds (comparable across nodes as far as their clocks agree).
std::string flight_json(DumpReason reason, int world_rank, const std::string& host) {
  const std::int64_t steady_now = now_ns();
  const double unix_now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto unix_of = [&](std::int64_t ns) { return unix_now - (steady_now - ns) * 1e-9; };
  std::string out = str("{\"format\": \"hpctrain-flight-1\", \"rank\": ", world_rank,
                        ", \"host\": ", json_quoted(host),
                        ", \"reason\": ", json_quoted(dump_reason_name(reason)),
                        ", \"time\": ", number(unix_now), ", \"pid\": ", ::getpid(), ",\n");
  out +=
      str(" \"position\": {\"step\": ", position::step(),
          ", \"phase\": ", json_quoted(phase_name(position::phase())),
          ", \"in_phase_s\": ", number((steady_now - position::phase_started_ns()) * 1e-9), "},\n");
  // A process stopped (SIGSTOP) and continued to be ended writes this file after the stop: say
  // how long it was stopped, so the file's position is not mistaken for a live one.
  double stall_ended_ago = 0;
  const double stalled = PeerMonitor::last_stall(stall_ended_ago);
  out += str(" \"stall\": {\"seconds\": ", number(stalled),
             ", \"ended_ago_s\": ", number(stalled > 0 ? stall_ended_ago : 0), "},\n");
  out += " \"channels\": [";
  bool first = true;
  for (Channel* c : channels()) {
    const ChannelState s = c->snapshot();
    std::string members;
    for (std::size_t i = 0; i < s.members.size(); ++i) {
      members += (i ? ", " : "") + std::to_string(s.members[i]);
    }
    out += str(first ? "\n  " : ",\n  ", "{\"id\": ", s.id, ", \"name\": ", json_quoted(s.name),
               ", \"group\": ", json_quoted(s.group), ", \"members\": [", members,
               "], \"issued\": ", s.issued, ", \"entered\": ", s.entered,
               ", \"entered_op\": ", json_quoted(s.entered_op), ", \"completed\": ", s.completed,
               ", \"completed_op\": ", json_quoted(s.completed_op), "}");
    first = false;
  }
  out += "],\n";
  Ring* ring = g_ring.load(std::memory_order_acquire);
  const std::int64_t next = g_next.load(std::memory_order_acquire);
  const std::int64_t capacity = ring ? static_cast<std::int64_t>(ring->capacity) : 0;
  out += str(" \"capacity\": ", capacity, ", \"recorded\": ", next, ",\n \"records\": [");
  first = true;
  for (std::int64_t id = std::max<std::int64_t>(0, next - capacity); id < next && ring; ++id) {
    const Record& r = ring->records[static_cast<std::size_t>(id % capacity)];
    if (r.id.load(std::memory_order_acquire) != id) continue;  // being rewritten
    Channel* c = r.channel.load(std::memory_order_relaxed);
    const std::uint8_t state = r.state.load(std::memory_order_relaxed);
    const std::int64_t start = r.start_ns.load(std::memory_order_relaxed);
    const std::int64_t end = r.end_ns.load(std::memory_order_relaxed);
    out += str(first ? "\n  " : ",\n  ", "{\"id\": ", id,
               ", \"channel\": ", json_quoted(c ? c->name() : std::string("p2p")),
               ", \"channel_id\": ", c ? c->id() : 0,
               ", \"op\": ", json_quoted(r.op.load(std::memory_order_relaxed)),
               ", \"seq\": ", r.seq.load(std::memory_order_relaxed),
               ", \"bytes\": ", r.bytes.load(std::memory_order_relaxed),
               ", \"dtype\": ", json_quoted(r.dtype.load(std::memory_order_relaxed)),
               ", \"state\": ", json_quoted(state_name(state)),
               ", \"enqueued\": ", number(unix_of(r.enqueue_ns.load(std::memory_order_relaxed))),
               ", \"started\": ", state >= kStarted && start ? number(unix_of(start)) : "null",
               ", \"ended\": ", state >= kCompleted && end ? number(unix_of(end)) : "null",
               ", \"clock\": ",
               r.device_timed.load(std::memory_order_relaxed) ? "\"device\"" : "\"host\"", "}");
    first = false;
  }
  out += "],\n \"peers\": [";
  first = true;
  for (const RankPosition& p : PeerMonitor::positions()) {
    std::string chans;
    for (std::size_t i = 0; i < p.channels.size(); ++i) {
      chans += str(i ? ", " : "", "{", channel_fields(p.channels[i]), "}");
    }
    out += str(first ? "\n  " : ",\n  ", "{\"rank\": ", p.world_rank,
               ", \"known\": ", p.known ? "true" : "false", ", \"host\": ", json_quoted(p.host),
               ", \"step\": ", p.step, ", \"phase\": ", json_quoted(phase_name(p.phase)),
               ", \"in_phase_s\": ", number(p.in_phase_s),
               ", \"heard\": ", number(unix_now - p.heard_ago_s), ", \"channels\": [", chans, "]}");
    first = false;
  }
  out += "]}\n";
  return out;
}

void dump_thread_loop() {
  DumpState& s = dump_state();
  for (;;) {
    pollfd p{s.pipe[0], POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return;
    // Requests that arrived together make one file (the first one's reason).
    std::uint8_t codes[64];
    const ssize_t n = ::read(s.pipe[0], codes, sizeof codes);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return;
    const auto reason = static_cast<DumpReason>(codes[0]);
    FlightRecorder::dump(reason);
    PeerMonitor::after_dump(reason);
  }
}

extern "C" void on_dump_signal(int) {
  const int fd = dump_state().pipe[1];
  if (fd < 0) return;
  const auto code = static_cast<std::uint8_t>(DumpReason::kSignal);
  ssize_t ignored = ::write(fd, &code, 1);
  (void)ignored;
}

}  // namespace

const char* dump_reason_name(DumpReason reason) {
  switch (reason) {
    case DumpReason::kCollectiveTimeout: return "collective timeout";
    case DumpReason::kLostRank: return "lost rank";
    case DumpReason::kSignal: return "SIGUSR2";
    case DumpReason::kRequested: return "requested by another rank";
    case DumpReason::kStopSignal: return "stop signal";
  }
  return "unknown";
}

void FlightRecorder::configure(std::size_t records) {
  Ring* ring = g_ring.load(std::memory_order_acquire);
  if (ring != nullptr && ring->capacity == records) return;
  g_ring.store(records > 0 ? new Ring(records) : nullptr, std::memory_order_release);
}

std::int64_t FlightRecorder::recorded() {
  return g_next.load(std::memory_order_relaxed);
}

std::size_t FlightRecorder::capacity() {
  Ring* ring = g_ring.load(std::memory_order_acquire);
  return ring ? ring->capacity : 0;
}

void FlightRecorder::set_directory(const std::string& directory, int world_rank,
                                   const std::string& host) {
  DumpState& s = dump_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.directory = directory;
  s.world_rank = world_rank;
  s.host = host;
}

std::string FlightRecorder::directory() {
  DumpState& s = dump_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.directory;
}

std::string FlightRecorder::dump(DumpReason reason) {
  DumpState& s = dump_state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.directory.empty()) return "";
  try {
    std::error_code ec;
    std::filesystem::create_directories(s.directory, ec);
    const std::string path = str(s.directory, "/rank-", s.world_rank, ".json");
    const std::string tmp = str(path, ".tmp.", ::getpid());
    const std::string text = flight_json(reason, s.world_rank, s.host);
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) {
      log::rank_warn(str("flight recorder: cannot write ", tmp, ": ", std::strerror(errno)));
      return "";
    }
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed || std::rename(tmp.c_str(), path.c_str()) != 0) {
      log::rank_warn(str("flight recorder: writing ", path, " failed: ", std::strerror(errno)));
      std::remove(tmp.c_str());
      return "";
    }
    return path;
  } catch (const std::exception& e) {
    log::rank_warn(str("flight recorder: dump failed: ", e.what()));
    return "";
  }
}

void FlightRecorder::request_dump(DumpReason reason) {
  DumpState& s = dump_state();
  if (!s.installed.load()) {
    dump(reason);
    return;
  }
  const auto code = static_cast<std::uint8_t>(reason);
  ssize_t ignored = ::write(s.pipe[1], &code, 1);
  (void)ignored;
}

void FlightRecorder::install() {
  DumpState& s = dump_state();
  if (s.installed.exchange(true)) return;
  if (::pipe2(s.pipe, O_CLOEXEC) != 0) {
    s.installed = false;
    return;
  }
  ::fcntl(s.pipe[0], F_SETFL, ::fcntl(s.pipe[0], F_GETFL) | O_NONBLOCK);
  ::fcntl(s.pipe[1], F_SETFL, ::fcntl(s.pipe[1], F_GETFL) | O_NONBLOCK);
  std::thread(dump_thread_loop).detach();
  struct sigaction action {};
  action.sa_handler = on_dump_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &action, nullptr);
}

bool FlightRecorder::installed() {
  return dump_state().installed.load();
}

std::int64_t FlightRecorder::record_issue(Channel* channel, std::uint64_t seq, const char* op,
                                          std::int64_t bytes, const char* dtype) {
  Ring* ring = g_ring.load(std::memory_order_acquire);
  if (ring == nullptr) return -1;
  const std::int64_t id = g_next.fetch_add(1, std::memory_order_acq_rel);
  Record& r = ring->records[static_cast<std::size_t>(id) % ring->capacity];
  r.id.store(-1, std::memory_order_relaxed);
  r.channel.store(channel, std::memory_order_relaxed);
  r.op.store(op, std::memory_order_relaxed);
  r.dtype.store(dtype ? dtype : "", std::memory_order_relaxed);
  r.seq.store(seq, std::memory_order_relaxed);
  r.bytes.store(bytes, std::memory_order_relaxed);
  r.enqueue_ns.store(now_ns(), std::memory_order_relaxed);
  r.start_ns.store(0, std::memory_order_relaxed);
  r.end_ns.store(0, std::memory_order_relaxed);
  r.device_timed.store(false, std::memory_order_relaxed);
  r.state.store(kQueued, std::memory_order_relaxed);
  r.id.store(id, std::memory_order_release);
  return id;
}

void FlightRecorder::record_start(std::int64_t id) {
  if (Record* r = find(id)) {
    r->start_ns.store(now_ns(), std::memory_order_relaxed);
    r->state.store(kStarted, std::memory_order_relaxed);
  }
}

void FlightRecorder::record_end(std::int64_t id, bool ok) {
  if (Record* r = find(id)) {
    r->end_ns.store(now_ns(), std::memory_order_relaxed);
    r->state.store(ok ? kCompleted : kFailed, std::memory_order_relaxed);
  }
}

void FlightRecorder::record_device_times(std::int64_t id, std::int64_t start_ns,
                                         std::int64_t end_ns) {
  if (Record* r = find(id)) {
    r->start_ns.store(start_ns, std::memory_order_relaxed);
    r->end_ns.store(end_ns, std::memory_order_relaxed);
    r->device_timed.store(true, std::memory_order_relaxed);
    r->state.store(kCompleted, std::memory_order_relaxed);
  }
}

void set_aside_flight_files(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run_dir) / "flight";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  std::vector<fs::path> old;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().filename().string().rfind("rank-", 0) == 0) old.push_back(entry.path());
  }
  if (old.empty()) return;
  const fs::path previous = dir / "previous";
  fs::remove_all(previous, ec);
  fs::create_directories(previous, ec);
  for (const fs::path& p : old) {
    fs::rename(p, previous / p.filename(), ec);
    if (ec) {
      log::warn(str("could not move the earlier job's flight file ", p.string(), " to ",
                    previous.string(), ": ", ec.message()));
      return;
    }
  }
  log::info(str("moved ", old.size(), " flight file(s) of an earlier job to ", previous.string()));
}

}  // namespace hpctrain::runtime
