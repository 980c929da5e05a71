#include "hpctrain/runtime/peer_monitor.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/outcome.hpp"
#include "hpctrain/runtime/position.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/stop_signals.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kMagic = 0x68707431;  // "hpt1"
enum MessageType : std::uint32_t {
  kHello = 1,         // connector -> acceptor: {from, subject = expected acceptor rank, token}
  kHelloAck = 2,      // acceptor -> connector
  kBeat = 3,          // heartbeat
  kBye = 4,           // leaving on purpose (normal end)
  kAbort = 5,         // ending the job on purpose (abort_job)
  kLost = 6,          // subject was lost; detail = reason
  kPositions = 7,     // detail = bytes of position records that follow the message
  kHang = 8,          // from claims the report of a collective timeout (flooded)
  kDumped = 9,        // from wrote its flight file after a hang claim (flooded)
  kDumpRequest = 10,  // from got SIGUSR2: every rank writes its flight file; detail = number
};
enum LostReason : std::uint32_t { kSilent = 1, kClosed = 2 };

// Fixed-size messages in host byte order: every rank of one job runs the same binary on the same
// architecture, and the token rejects anything else.
struct Message {
  std::uint32_t magic = kMagic;
  std::uint32_t type = 0;
  std::uint32_t from = 0;
  std::uint32_t subject = 0;
  std::uint32_t detail = 0;     // kLost: the LostReason
  std::uint32_t silent_ms = 0;  // kLost: how long the subject had been silent
  std::uint64_t token = 0;
};
static_assert(sizeof(Message) == 32, "wire format");

// One rank's position on the wire: this header, then `channel_count` WireChannels. Sequence
// numbers travel as their low 32 bits (enough to compare numbers a few billion apart).
struct WirePosition {
  std::uint32_t rank = 0;
  std::uint32_t version = 0;  // counts up with each of that rank's beats: newer replaces older
  std::int64_t step = 0;
  std::uint32_t in_phase_ms = 0;
  std::uint8_t phase = 0;
  std::uint8_t channel_count = 0;
  std::uint16_t reserved = 0;
};
static_assert(sizeof(WirePosition) == 24, "wire format");
struct WireChannel {
  std::uint32_t id = 0;
  std::uint32_t entered = 0;
  std::uint32_t completed = 0;
  std::uint16_t entered_op = 0;
  std::uint16_t completed_op = 0;
};
static_assert(sizeof(WireChannel) == 16, "wire format");
constexpr int kMaxWireChannels = 64;
constexpr std::uint32_t kMaxPayload = 1u << 24;
// Bytes waiting for a neighbour that does not read (stopped) are capped; positions beyond the
// cap are dropped (newer ones follow), other messages are kept.
constexpr std::size_t kOutboxCap = 8u << 20;

constexpr int kMaxAddresses = 8;
constexpr int kHostChars = 64;
// What each rank publishes (MPI_Allgather as bytes).
struct Endpoint {
  std::uint32_t addresses[kMaxAddresses] = {};  // IPv4, network byte order; loopback last
  std::uint32_t address_count = 0;
  std::uint32_t port = 0;  // network byte order in the low 16 bits
  char host[kHostChars] = {};
  char node[kHostChars] = {};  // the name in messages: Slurm's node name where there is one
};

struct Link {
  int fd = -1;
  int peer = -1;          // world rank at the other end
  bool finished = false;  // said goodbye or abort: its silence or close is no loss
  Clock::time_point last_heard;
  std::vector<char> pending;  // bytes of a message not yet complete
  std::string outbox;         // bytes not yet taken by the socket (guarded by send_mutex)
};

// What the ring carried about one rank.
struct Peer {
  bool known = false;
  std::uint32_t version = 0;
  Clock::time_point heard;
  std::int64_t step = 0;
  std::uint8_t phase = 0;
  std::uint32_t in_phase_ms = 0;
  std::vector<WireChannel> channels;
};

struct State {
  std::timed_mutex send_mutex;  // sends come from the monitor thread and from stop()/abort paths
  std::thread thread;
  std::atomic<bool> running{false};
  int wake[2] = {-1, -1};
  double timeout_s = 0;
  double period_s = 1;
  int world_rank = 0;
  int world_size = 1;
  std::uint64_t token = 0;
  std::vector<Endpoint> endpoints;
  std::vector<Link> links;
  std::string off_reason;
  Clock::time_point started;
  std::atomic<std::uint64_t> bytes_sent{0};
  // Positions (guarded by peers_mutex; the monitor thread writes, anyone reads).
  std::mutex peers_mutex;
  std::vector<Peer> peers;
  std::uint32_t version = 0;  // this rank's beats (monitor thread)
  // Flooded messages: what each origin sent last (monitor thread only).
  std::vector<char> hang_seen;
  std::vector<char> dumped_seen;
  std::vector<std::uint32_t> request_seen;
  std::atomic<int> hang_claim{-1};  // the lowest other rank that claimed a hang report
  std::atomic<int> dumped_count{0};
  std::atomic<bool> dumped_sent{false};
  std::atomic<std::uint32_t> dump_requests{0};
  // The last time this process was stopped or starved (the monitor loop ran late): how long, and
  // when it ended (steady-clock ns).
  std::atomic<double> stalled_s{0};
  std::atomic<std::int64_t> stall_end_ns{0};
  bool abort_noted = false;  // a rank's abort announcement was noted and passed along
};

State& state() {
  static State s;
  return s;
}

std::string ip_text(std::uint32_t address) {
  char text[INET_ADDRSTRLEN] = {0};
  in_addr a{};
  a.s_addr = address;
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

std::string describe_rank(int world_rank) {
  const State& s = state();
  if (world_rank < 0 || world_rank >= static_cast<int>(s.endpoints.size()))
    return str("rank ", world_rank);
  const Endpoint& e = s.endpoints[static_cast<std::size_t>(world_rank)];
  std::string where = str("rank ", world_rank, " (host ", std::string(e.node));
  if (e.address_count > 0) where += str(", ", ip_text(e.addresses[0]));
  return where + ")";
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// send_message: whole message or nothing useful; never blocks past `timeout_ms` (0: not at all).
bool send_message(int fd, const Message& m, int timeout_ms) {
  const char* data = reinterpret_cast<const char*>(&m);
  std::size_t sent = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (sent < sizeof(m)) {
    ssize_t n = ::send(fd, data + sent, sizeof(m) - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left.count()));
      continue;
    }
    return false;
  }
  return true;
}

// recv_message: one whole message within `timeout_ms`; false on timeout, close or error.
bool recv_message(int fd, Message& m, int timeout_ms) {
  char* data = reinterpret_cast<char*>(&m);
  std::size_t got = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (got < sizeof(m)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    ssize_t n = ::recv(fd, data + got, sizeof(m) - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) {
      return false;
    }
  }
  return m.magic == kMagic;
}

void tune_socket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// This host's IPv4 addresses: interfaces that are up, loopback last.
Endpoint local_endpoint(std::uint16_t port, const std::string& host) {
  Endpoint e;
  std::vector<std::uint32_t> loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
      std::uint32_t a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      if (i->ifa_flags & IFF_LOOPBACK) {
        loopback.push_back(a);
      } else if (e.address_count < kMaxAddresses) {
        e.addresses[e.address_count++] = a;
      }
    }
    ::freeifaddrs(list);
  }
  if (loopback.empty()) loopback.push_back(htonl(INADDR_LOOPBACK));
  if (e.address_count < kMaxAddresses) e.addresses[e.address_count++] = loopback.front();
  e.port = htons(port);
  std::snprintf(e.host, sizeof(e.host), "%s", host.c_str());
  return e;
}

// connect_to: a verified connection to world rank `peer` (HELLO answered by HELLO_ACK), trying
// each published address; -1 with `why` set when none answers. The handshake guards against an
// address that reaches another process on this host (a shared private address such as a
// container bridge): only the right rank of this job answers with the token.
int connect_to(int peer, std::string& why) {
  State& s = state();
  const Endpoint& e = s.endpoints[static_cast<std::size_t>(peer)];
  const bool same_host = std::string(e.host) == s.endpoints[s.world_rank].host;
  for (std::uint32_t i = 0; i < e.address_count; ++i) {
    const std::uint32_t address = e.addresses[i];
    if (ntohl(address) >> 24 == 127 && !same_host) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      why = str("socket(): ", std::strerror(errno));
      return -1;
    }
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = address;
    to.sin_port = static_cast<in_port_t>(e.port);
    int r = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to));
    if (r != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = ETIMEDOUT;
      if (::poll(&p, 1, 3000) == 1) {
        socklen_t length = sizeof(error);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      }
      r = error == 0 ? 0 : -1;
      errno = error;
    }
    if (r != 0) {
      why = str("connecting to ", ip_text(address), ":", ntohs(static_cast<in_port_t>(e.port)),
                ": ", std::strerror(errno));
      ::close(fd);
      continue;
    }
    Message hello;
    hello.type = kHello;
    hello.from = static_cast<std::uint32_t>(s.world_rank);
    hello.subject = static_cast<std::uint32_t>(peer);
    hello.token = s.token;
    Message ack;
    if (send_message(fd, hello, 3000) && recv_message(fd, ack, 10000) && ack.type == kHelloAck &&
        ack.token == s.token && ack.from == static_cast<std::uint32_t>(peer)) {
      return fd;
    }
    why = str(ip_text(address), ":", ntohs(static_cast<in_port_t>(e.port)),
              " did not answer as rank ", peer, " of this job");
    ::close(fd);
  }
  return -1;
}

// accept_from: the verified connection of world rank `peer`, or -1 after the deadline.
int accept_from(int listen_fd, int peer, double seconds, std::string& why) {
  State& s = state();
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<long>(1, left.count()))) <= 0) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Message hello;
    if (recv_message(fd, hello, 3000) && hello.type == kHello && hello.token == s.token &&
        hello.from == static_cast<std::uint32_t>(peer) &&
        hello.subject == static_cast<std::uint32_t>(s.world_rank)) {
      Message ack;
      ack.type = kHelloAck;
      ack.from = static_cast<std::uint32_t>(s.world_rank);
      ack.token = s.token;
      if (send_message(fd, ack, 3000)) return fd;
    }
    ::close(fd);  // not our predecessor (another job, a stray connection): keep waiting
  }
  why = str("rank ", peer, " did not connect within ", format_seconds(seconds));
  return -1;
}

// Writes what the socket takes of the link's outbox. Caller holds send_mutex.
void flush_link(Link& link) {
  State& s = state();
  while (!link.outbox.empty() && link.fd >= 0) {
    ssize_t n =
        ::send(link.fd, link.outbox.data(), link.outbox.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      s.bytes_sent.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
      link.outbox.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // full (the rest goes when poll says writable) or failed (the reader notices)
  }
}

// Queues `size` bytes for the link and writes what the socket takes now; a message never goes
// out in part ahead of another, so the stream stays whole. Caller holds send_mutex.
bool queue_bytes(Link& link, const void* data, std::size_t size, bool droppable) {
  if (link.fd < 0 || link.finished) return false;
  if (droppable && link.outbox.size() + size > kOutboxCap) return false;
  link.outbox.append(static_cast<const char*>(data), size);
  flush_link(link);
  return true;
}

void send_to_all(const Message& m, int except_fd = -1) {
  State& s = state();
  std::lock_guard<std::timed_mutex> lock(s.send_mutex);
  for (Link& link : s.links) {
    if (link.fd < 0 || link.fd == except_fd || link.finished) continue;
    queue_bytes(link, &m, sizeof m, false);
  }
}

// Passes a flooded message on to the neighbours other than the one it came from and its origin.
void forward(const Message& m, const Link& from) {
  State& s = state();
  std::lock_guard<std::timed_mutex> lock(s.send_mutex);
  for (Link& link : s.links) {
    if (link.fd < 0 || link.fd == from.fd || link.peer == static_cast<int>(m.from)) continue;
    queue_bytes(link, &m, sizeof m, false);
  }
}

// Waits up to `timeout_ms` for every outbox to empty. Caller holds send_mutex.
void drain_outboxes(int timeout_ms) {
  State& s = state();
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    for (Link& link : s.links) {
      flush_link(link);
      if (link.fd >= 0 && !link.outbox.empty()) fds.push_back(pollfd{link.fd, POLLOUT, 0});
    }
    if (fds.empty()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return;
    ::poll(fds.data(), fds.size(), static_cast<int>(left.count()));
  }
}

std::string phase_text(std::uint8_t phase) {
  return phase_name(static_cast<Phase>(phase));
}

// "step 120, in backward for 1.2 s when last heard 4.1 s ago; dp all_reduce #48 entered, #47
// completed" for messages about a rank that was lost.
std::string last_position(int world_rank) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.peers_mutex);
  if (world_rank < 0 || world_rank >= static_cast<int>(s.peers.size()) ||
      !s.peers[static_cast<std::size_t>(world_rank)].known) {
    return "";
  }
  const Peer& p = s.peers[static_cast<std::size_t>(world_rank)];
  const double ago = std::chrono::duration<double>(Clock::now() - p.heard).count();
  std::string text =
      str("step ", p.step, ", in ", phase_text(p.phase), " for ",
          format_seconds(p.in_phase_ms / 1000.0), " when last heard ", format_seconds(ago), " ago");
  for (const WireChannel& c : p.channels) {
    Channel* mine = channel_by_id(c.id);
    if (mine == nullptr || c.entered == 0) continue;
    text += str(
        "; ", mine->name(), " ", op_name(c.entered_op), " #", c.entered,
        c.completed >= c.entered ? " completed" : str(" entered, #", c.completed, " completed"));
  }
  return text;
}

[[noreturn]] void lost(int lost_rank, int reported_by, std::uint32_t reason, double silent_s) {
  State& s = state();
  Message m;
  m.type = kLost;
  m.from = static_cast<std::uint32_t>(s.world_rank);
  m.subject = static_cast<std::uint32_t>(lost_rank);
  m.detail = reason;
  m.silent_ms = static_cast<std::uint32_t>(std::min(silent_s * 1000, 4e9));
  m.token = s.token;
  send_to_all(m);  // along the ring, so every surviving rank learns it at once
  {
    std::unique_lock<std::timed_mutex> lock(s.send_mutex, std::chrono::milliseconds(500));
    if (lock.owns_lock()) drain_outboxes(500);
  }
  std::string how = reason == kClosed ? std::string("its connection closed without a goodbye")
                                      : str("no heartbeat for ", format_seconds(silent_s),
                                            " (timeout ", format_seconds(s.timeout_s), ")");
  if (reported_by != s.world_rank) how = str("reported by ", describe_rank(reported_by), ": ", how);
  const std::string flight = FlightRecorder::dump(DumpReason::kLostRank);
  const std::string flight_note =
      flight.empty() ? std::string()
                     : str(" Flight records: ", FlightRecorder::directory(), "/rank-*.json.");
  if (lost_rank == s.world_rank) {
    // This rank was silent (stopped, starved, or cut off) and the others gave up on it.
    log::error(str("the other ranks lost contact with this rank (", how,
                   "): it was stopped or starved for longer than the peer timeout, or the network "
                   "to it broke. Ending with exit code ",
                   static_cast<int>(kExitComm), " (communicator failure).", flight_note));
    write_outcome(kExitComm,
                  str("the other ranks lost contact with rank ", s.world_rank, " (", how, ")"),
                  s.world_rank);
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(kExitComm);
  }
  const std::string last = last_position(lost_rank);
  if (!last.empty()) how += str(". Its last known position: ", last);
  log::error(str("lost ", describe_rank(lost_rank), ": ", how,
                 ". Its process died, its node failed, or the network to it broke; the job cannot "
                 "continue without it. Ending with exit code ",
                 static_cast<int>(kExitComm),
                 " (communicator failure); resume from the latest checkpoint on the nodes left "
                 "(jobs/train.sbatch requeues itself). Tune with --peer-timeout or "
                 "HPCTRAIN_PEER_TIMEOUT.",
                 flight_note));
  write_outcome(kExitComm, str("lost ", describe_rank(lost_rank), ": ", how), s.world_rank);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(kExitComm);
}

// This rank's position record (monitor thread).
std::string encode_own_position() {
  State& s = state();
  WirePosition p;
  p.rank = static_cast<std::uint32_t>(s.world_rank);
  p.version = ++s.version;
  p.step = position::step();
  p.phase = static_cast<std::uint8_t>(position::phase());
  const auto now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  p.in_phase_ms = static_cast<std::uint32_t>(
      std::clamp<std::int64_t>((now_ns - position::phase_started_ns()) / 1000000, 0, 4000000000));
  std::vector<WireChannel> wire;
  for (Channel* c : channels()) {
    if (c->entered() == 0 || static_cast<int>(wire.size()) == kMaxWireChannels) continue;
    WireChannel w;
    w.id = c->id();
    w.entered = static_cast<std::uint32_t>(c->entered());
    w.completed = static_cast<std::uint32_t>(c->completed());
    w.entered_op = op_code(c->entered_op());
    w.completed_op = op_code(c->completed_op());
    wire.push_back(w);
  }
  p.channel_count = static_cast<std::uint8_t>(wire.size());
  std::string out(reinterpret_cast<const char*>(&p), sizeof p);
  if (!wire.empty()) {
    out.append(reinterpret_cast<const char*>(wire.data()), wire.size() * sizeof(WireChannel));
  }
  return out;
}

// Sends position records to `link` as one kPositions message, leaving out the link's own rank's.
// Caller holds send_mutex.
bool send_positions(Link& link, const std::vector<std::pair<int, std::string>>& records) {
  State& s = state();
  std::string payload;
  for (const auto& [rank, bytes] : records) {
    if (rank != link.peer) payload += bytes;
  }
  if (payload.empty()) return false;
  Message m;
  m.type = kPositions;
  m.from = static_cast<std::uint32_t>(s.world_rank);
  m.detail = static_cast<std::uint32_t>(payload.size());
  m.token = s.token;
  std::string message(reinterpret_cast<const char*>(&m), sizeof m);
  message += payload;
  return queue_bytes(link, message.data(), message.size(), true);
}

// Takes the newer of the position records in `payload`; returns them (to pass on).
std::vector<std::pair<int, std::string>> take_positions(const char* payload, std::size_t size,
                                                        Clock::time_point now) {
  State& s = state();
  std::vector<std::pair<int, std::string>> newer;
  std::size_t at = 0;
  std::lock_guard<std::mutex> lock(s.peers_mutex);
  while (size - at >= sizeof(WirePosition)) {
    WirePosition p;
    std::memcpy(&p, payload + at, sizeof p);
    const std::size_t length = sizeof p + p.channel_count * sizeof(WireChannel);
    if (length > size - at) break;  // malformed: drop the rest
    const int rank = static_cast<int>(p.rank);
    if (rank >= 0 && rank < s.world_size && rank != s.world_rank) {
      Peer& peer = s.peers[static_cast<std::size_t>(rank)];
      if (!peer.known || p.version > peer.version) {
        peer.known = true;
        peer.version = p.version;
        peer.heard = now;
        peer.step = p.step;
        peer.phase = p.phase;
        peer.in_phase_ms = p.in_phase_ms;
        peer.channels.resize(p.channel_count);
        if (p.channel_count > 0) {
          std::memcpy(peer.channels.data(), payload + at + sizeof p,
                      p.channel_count * sizeof(WireChannel));
        }
        newer.emplace_back(rank, std::string(payload + at, length));
      }
    }
    at += length;
  }
  return newer;
}

// Acts on one whole message from `link` (positions: the payload follows it).
void handle(Link& link, const Message& m, const char* payload, Clock::time_point now) {
  State& s = state();
  const int from = static_cast<int>(m.from);
  const bool valid_from = from >= 0 && from < s.world_size && from != s.world_rank;
  switch (m.type) {
    case kBye: link.finished = true; break;
    case kAbort:
      link.finished = true;
      // Along the ring once, so that every rank knows the launcher's coming stop signal is that
      // rank's error, not a request to stop (stop_signals.hpp, note_job_abort).
      if (static_cast<int>(m.subject) != s.world_rank && !s.abort_noted) {
        s.abort_noted = true;
        note_job_abort(static_cast<int>(m.subject), static_cast<int>(m.detail));
        forward(m, link);
      }
      break;
    case kLost: lost(static_cast<int>(m.subject), from, m.detail, m.silent_ms / 1000.0);
    case kPositions: {
      const auto newer = take_positions(payload, m.detail, now);
      if (newer.empty()) break;
      std::lock_guard<std::timed_mutex> lock(s.send_mutex);
      for (Link& other : s.links) {
        if (other.fd != link.fd) send_positions(other, newer);
      }
      break;
    }
    case kHang:
      if (!valid_from || s.hang_seen[static_cast<std::size_t>(from)]) break;
      s.hang_seen[static_cast<std::size_t>(from)] = 1;
      forward(m, link);
      {
        int seen = s.hang_claim.load();
        while ((seen < 0 || from < seen) && !s.hang_claim.compare_exchange_weak(seen, from)) {
        }
      }
      FlightRecorder::request_dump(DumpReason::kCollectiveTimeout);
      break;
    case kDumped:
      if (!valid_from || s.dumped_seen[static_cast<std::size_t>(from)]) break;
      s.dumped_seen[static_cast<std::size_t>(from)] = 1;
      forward(m, link);
      s.dumped_count.fetch_add(1);
      break;
    case kDumpRequest:
      if (!valid_from || m.detail <= s.request_seen[static_cast<std::size_t>(from)]) break;
      s.request_seen[static_cast<std::size_t>(from)] = m.detail;
      forward(m, link);
      FlightRecorder::request_dump(DumpReason::kRequested);
      break;
    default: break;  // heartbeats only refresh last_heard
  }
}

// Reads what arrived on `link`; returns false when the connection closed or failed.
bool drain(Link& link, Clock::time_point now) {
  State& s = state();
  char buffer[4096];
  while (true) {
    ssize_t n = ::recv(link.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    link.pending.insert(link.pending.end(), buffer, buffer + n);
    link.last_heard = now;
    std::size_t used = 0;
    while (link.pending.size() - used >= sizeof(Message)) {
      Message m;
      std::memcpy(&m, link.pending.data() + used, sizeof(m));
      if (m.magic != kMagic || m.token != s.token) {
        used += sizeof(m);
        continue;
      }
      std::size_t payload = 0;
      if (m.type == kPositions) {
        if (m.detail > kMaxPayload) return false;  // not a message of this job's monitor
        payload = m.detail;
        if (link.pending.size() - used < sizeof(m) + payload) break;  // the rest comes later
      }
      handle(link, m, link.pending.data() + used + sizeof(m), now);
      used += sizeof(m) + payload;
    }
    link.pending.erase(link.pending.begin(),
                       link.pending.begin() + static_cast<std::ptrdiff_t>(used));
  }
}

void monitor_loop() {
  State& s = state();
  auto last_beat = Clock::now() - std::chrono::hours(1);
  auto last_loop = Clock::now();
  const auto period = std::chrono::duration<double>(s.period_s);
  // A loop iteration late by this much means this process was stopped (SIGSTOP, a suspended
  // job) or starved: the silence it saw is its own, so the neighbours' clocks restart.
  const auto stall = std::chrono::duration<double>(std::max(3 * s.period_s, s.timeout_s / 2));
  std::vector<pollfd> fds;
  while (s.running.load()) {
    if (Clock::now() - last_beat >= period) {
      // The beat is this rank's position: a heartbeat that every rank hears, not only the
      // neighbours.
      const std::vector<std::pair<int, std::string>> mine{{s.world_rank, encode_own_position()}};
      std::lock_guard<std::timed_mutex> lock(s.send_mutex);
      for (Link& link : s.links) {
        if (link.fd < 0 || link.finished) continue;
        if (!send_positions(link, mine)) {
          Message beat;  // a position dropped for a full outbox: at least a heartbeat
          beat.type = kBeat;
          beat.from = static_cast<std::uint32_t>(s.world_rank);
          beat.token = s.token;
          queue_bytes(link, &beat, sizeof beat, true);
        }
      }
      last_beat = Clock::now();
    }
    fds.clear();
    fds.push_back(pollfd{s.wake[0], POLLIN, 0});
    {
      std::lock_guard<std::timed_mutex> lock(s.send_mutex);
      for (const Link& link : s.links) {
        const short events = link.outbox.empty() ? POLLIN : (POLLIN | POLLOUT);
        fds.push_back(pollfd{link.fd, events, 0});
      }
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(s.period_s * 1000 / 2));
    if (!s.running.load()) break;
    const auto now = Clock::now();
    if (now - last_loop > stall) {
      for (Link& link : s.links) link.last_heard = now;
    }
    if (now - last_loop > 5 * period) {  // the flight file says so (its position is that late)
      s.stalled_s = std::chrono::duration<double>(now - last_loop).count();
      s.stall_end_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    }
    last_loop = now;
    for (std::size_t i = 0; i < s.links.size(); ++i) {
      Link& link = s.links[i];
      if (link.fd < 0) continue;
      if (fds[i + 1].revents & POLLOUT) {
        std::lock_guard<std::timed_mutex> lock(s.send_mutex);
        flush_link(link);
      }
      if ((fds[i + 1].revents & ~POLLOUT) != 0 && !drain(link, now)) {
        if (!link.finished) lost(link.peer, s.world_rank, kClosed, 0);
        std::lock_guard<std::timed_mutex> lock(s.send_mutex);
        close_fd(link.fd);
        continue;
      }
      const double silent = std::chrono::duration<double>(now - link.last_heard).count();
      if (!link.finished && silent > s.timeout_s) lost(link.peer, s.world_rank, kSilent, silent);
    }
  }
}

void close_links() {
  State& s = state();
  std::lock_guard<std::timed_mutex> lock(s.send_mutex);
  for (Link& link : s.links) close_fd(link.fd);
  s.links.clear();
  close_fd(s.wake[0]);
  close_fd(s.wake[1]);
}

}  // namespace

void PeerMonitor::start(const Runtime& runtime, double timeout_s) {
  stop();
  State& s = state();
  s.off_reason.clear();
  s.timeout_s = 0;
  if (timeout_s <= 0 || runtime.world_size() < 2) return;
  s.world_rank = runtime.world_rank();
  s.world_size = runtime.world_size();
  s.period_s = std::min(1.0, timeout_s / 4);

  std::string why;
  int listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  any.sin_port = 0;
  socklen_t length = sizeof(any);
  if (listen_fd < 0 || ::bind(listen_fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::listen(listen_fd, 16) != 0 ||
      ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    why = str("cannot listen on a TCP port: ", std::strerror(errno));
  }
  Endpoint mine = local_endpoint(ntohs(any.sin_port), runtime.host());
  std::snprintf(mine.node, sizeof(mine.node), "%s", node_name(runtime.host()).c_str());

  std::uint64_t token = 0;
  if (s.world_rank == 0) {
    std::random_device device;
    token = (static_cast<std::uint64_t>(device()) << 32) ^ device() ^
            static_cast<std::uint64_t>(Clock::now().time_since_epoch().count());
  }
  HPCTRAIN_MPI_CHECK(MPI_Bcast(&token, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
  s.token = token;
  s.endpoints.assign(static_cast<std::size_t>(s.world_size), Endpoint{});
  HPCTRAIN_MPI_CHECK(MPI_Allgather(&mine, sizeof(Endpoint), MPI_BYTE, s.endpoints.data(),
                                   sizeof(Endpoint), MPI_BYTE, MPI_COMM_WORLD));
  int listening = why.empty() ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &listening, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));

  int out_fd = -1;
  int in_fd = -1;
  if (listening) {
    const int successor = (s.world_rank + 1) % s.world_size;
    const int predecessor = (s.world_rank + s.world_size - 1) % s.world_size;
    // Accepting on a thread while connecting: every rank connects to its successor and waits for
    // its answer, which comes from that rank's acceptor.
    std::string accept_why;
    std::thread acceptor([&] { in_fd = accept_from(listen_fd, predecessor, 20, accept_why); });
    out_fd = connect_to(successor, why);
    acceptor.join();
    if (why.empty() && in_fd < 0) why = accept_why;
    if (out_fd < 0 && why.empty()) why = str("cannot reach rank ", successor);
  }
  if (listen_fd >= 0) ::close(listen_fd);
  int ok = (out_fd >= 0 && in_fd >= 0) ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!ok) {
    close_fd(out_fd);
    close_fd(in_fd);
    if (!why.empty()) {
      log::rank_warn(str("peer monitor: ", why));
      s.off_reason = why;
    } else {
      s.off_reason = "another rank could not connect (see its warning)";
    }
    log::warn(
        "peer monitor off: the ranks could not connect to each other over TCP (see the rank "
        "warnings). A dead peer process or node is then noticed only by the collective "
        "timeout (--collective-timeout, exit 7)");
    return;
  }
  tune_socket(out_fd);
  tune_socket(in_fd);
  const auto now = Clock::now();
  s.links.clear();
  s.links.push_back(Link{out_fd, (s.world_rank + 1) % s.world_size, false, now, {}, {}});
  s.links.push_back(
      Link{in_fd, (s.world_rank + s.world_size - 1) % s.world_size, false, now, {}, {}});
  if (::pipe2(s.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    s.off_reason = str("pipe2(): ", std::strerror(errno));
    close_links();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(s.peers_mutex);
    s.peers.assign(static_cast<std::size_t>(s.world_size), Peer{});
  }
  s.hang_seen.assign(static_cast<std::size_t>(s.world_size), 0);
  s.dumped_seen.assign(static_cast<std::size_t>(s.world_size), 0);
  s.request_seen.assign(static_cast<std::size_t>(s.world_size), 0);
  s.hang_claim = -1;
  s.dumped_count = 0;
  s.dumped_sent = false;
  s.bytes_sent = 0;
  s.started = Clock::now();
  s.timeout_s = timeout_s;
  s.running = true;
  s.thread = std::thread(monitor_loop);
}

void PeerMonitor::stop() {
  State& s = state();
  if (!s.running.exchange(false)) return;
  Message bye;
  bye.type = kBye;
  bye.from = static_cast<std::uint32_t>(s.world_rank);
  bye.token = s.token;
  const double seconds = std::chrono::duration<double>(Clock::now() - s.started).count();
  {
    std::lock_guard<std::timed_mutex> lock(s.send_mutex);
    for (Link& link : s.links) queue_bytes(link, &bye, sizeof bye, false);
    drain_outboxes(1000);
  }
  log::debug(str("peer monitor: ", s.bytes_sent.load(), " bytes sent to the ring neighbours in ",
                 format_seconds(seconds), " (",
                 static_cast<long long>(seconds > 0 ? s.bytes_sent.load() / seconds : 0),
                 " bytes/s from this rank, carrying the positions of ", s.world_size, " ranks)"));
  if (s.wake[1] >= 0) {
    char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(s.wake[1], &byte, 1);
  }
  if (s.thread.joinable()) s.thread.join();
  close_links();
  s.timeout_s = 0;
}

void PeerMonitor::announce_abort(int exit_code) {
  State& s = state();
  if (!s.running.load()) return;
  Message m;
  m.type = kAbort;
  m.from = static_cast<std::uint32_t>(s.world_rank);
  m.subject = static_cast<std::uint32_t>(s.world_rank);
  m.detail = static_cast<std::uint32_t>(exit_code);
  m.token = s.token;
  // Wait a moment for a send of the monitor thread, never for long: abort_job must not hang.
  std::unique_lock<std::timed_mutex> lock(s.send_mutex, std::chrono::milliseconds(100));
  if (!lock.owns_lock()) return;
  for (Link& link : s.links) queue_bytes(link, &m, sizeof m, false);
  drain_outboxes(200);
}

bool PeerMonitor::running() {
  return state().running.load();
}

double PeerMonitor::timeout() {
  return state().timeout_s;
}

std::string PeerMonitor::off_reason() {
  return state().off_reason;
}

std::vector<RankPosition> PeerMonitor::positions() {
  State& s = state();
  const auto now = Clock::now();
  const Runtime* rt = Runtime::current();
  const int self = rt ? rt->world_rank() : 0;
  // This rank's own position, as of now.
  RankPosition mine;
  mine.world_rank = self;
  mine.known = true;
  mine.host = rt ? node_name(rt->host()) : std::string();
  mine.step = position::step();
  mine.phase = position::phase();
  const auto now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  mine.in_phase_s = (now_ns - position::phase_started_ns()) * 1e-9;
  for (Channel* c : channels()) {
    const ChannelState st = c->snapshot();
    mine.channels.push_back(
        ChannelPosition{st.id, st.name, st.entered, st.entered_op, st.completed, st.completed_op});
  }
  if (!s.running.load()) return {mine};
  std::vector<RankPosition> out;
  std::lock_guard<std::mutex> lock(s.peers_mutex);
  for (int r = 0; r < static_cast<int>(s.peers.size()); ++r) {
    if (r == self) {
      out.push_back(mine);
      continue;
    }
    const Peer& p = s.peers[static_cast<std::size_t>(r)];
    RankPosition q;
    q.world_rank = r;
    q.host = r < static_cast<int>(s.endpoints.size())
                 ? std::string(s.endpoints[static_cast<std::size_t>(r)].node)
                 : std::string();
    q.known = p.known;
    if (p.known) {
      q.step = p.step;
      q.phase = static_cast<Phase>(p.phase);
      q.in_phase_s = p.in_phase_ms / 1000.0;
      q.heard_ago_s = std::chrono::duration<double>(now - p.heard).count();
      for (const WireChannel& c : p.channels) {
        Channel* known = channel_by_id(c.id);
        q.channels.push_back(ChannelPosition{c.id, known ? known->name() : std::string(), c.entered,
                                             op_name(c.entered_op), c.completed,
                                             op_name(c.completed_op)});
      }
    }
    out.push_back(std::move(q));
  }
  return out;
}

int PeerMonitor::claim_hang_report() {
  State& s = state();
  const Runtime* rt = Runtime::current();
  const int self = rt ? rt->world_rank() : 0;
  if (!s.running.load()) return self;
  const int other = s.hang_claim.load();
  if (other >= 0) return other;  // another rank reports; its claim asked for this rank's file
  Message m;
  m.type = kHang;
  m.from = static_cast<std::uint32_t>(s.world_rank);
  m.token = s.token;
  send_to_all(m);
  // Claims made at once cross on the ring within milliseconds; the lowest claimant reports.
  const double window = std::max(0.5, 0.002 * s.world_size);
  std::this_thread::sleep_for(std::chrono::duration<double>(window));
  const int seen = s.hang_claim.load();
  return seen >= 0 && seen < self ? seen : self;
}

void PeerMonitor::wait_for_dumps(double seconds) {
  State& s = state();
  if (!s.running.load()) return;
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    int alive = 0;
    {
      std::lock_guard<std::mutex> lock(s.peers_mutex);
      const auto now = Clock::now();
      for (int r = 0; r < static_cast<int>(s.peers.size()); ++r) {
        const Peer& p = s.peers[static_cast<std::size_t>(r)];
        if (r != s.world_rank && p.known &&
            std::chrono::duration<double>(now - p.heard).count() < 3.0) {
          ++alive;
        }
      }
    }
    if (s.dumped_count.load() >= alive) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void PeerMonitor::after_dump(DumpReason reason) {
  State& s = state();
  if (!s.running.load()) return;
  Message m;
  m.from = static_cast<std::uint32_t>(s.world_rank);
  m.token = s.token;
  if (reason == DumpReason::kCollectiveTimeout) {
    if (s.dumped_sent.exchange(true)) return;
    m.type = kDumped;
  } else if (reason == DumpReason::kSignal) {
    m.type = kDumpRequest;
    m.detail = ++s.dump_requests;
  } else {
    return;
  }
  send_to_all(m);
}

double PeerMonitor::last_stall(double& ended_ago_s) {
  State& s = state();
  const std::int64_t end = s.stall_end_ns.load();
  if (end == 0) return 0;
  const auto now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  ended_ago_s = (now_ns - end) * 1e-9;
  return s.stalled_s.load();
}

std::uint64_t PeerMonitor::bytes_sent() {
  return state().bytes_sent.load();
}

double PeerMonitor::seconds_running() {
  State& s = state();
  if (!s.running.load()) return 0;
  return std::chrono::duration<double>(Clock::now() - s.started).count();
}

}  // namespace hpctrain::runtime
