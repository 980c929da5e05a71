#pragma once
// The peer monitor's transport (peer_monitor.hpp): the TCP sockets of the heartbeat ring. Each
// rank publishes its addresses, connects to its successor and accepts its predecessor, both
// verified by a handshake with the job's token; each connection keeps an outbox (bytes the socket
// has not taken yet, so a neighbour that does not read never blocks this rank) and a FrameReader
// for what arrives. Only sockets here: what to send and what a message means is the ring's policy
// (peer_ring.hpp).

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/runtime/peer_wire.hpp"

namespace hpctrain::runtime::peer {

constexpr int kMaxAddresses = 8;
constexpr int kHostChars = 64;

/// What each rank publishes to the others (MPI_Allgather as bytes).
struct Endpoint {
  std::uint32_t addresses[kMaxAddresses] = {};  ///< IPv4, network byte order; loopback last
  std::uint32_t address_count = 0;
  std::uint32_t port = 0;  ///< network byte order in the low 16 bits
  char host[kHostChars] = {};
  char node[kHostChars] = {};  ///< the name in messages: Slurm's node name where there is one
};

/// This host's endpoint: the IPv4 addresses of interfaces that are up (loopback last), `port`,
/// the host name and the node name for messages. Local.
Endpoint local_endpoint(std::uint16_t port, const std::string& host, const std::string& node);
/// "10.0.0.3". Local.
std::string ip_text(std::uint32_t address);

/// A listening TCP socket on a free port of every address; -1 with `why` set on failure. Local.
int listen_any(std::uint16_t& port, std::string& why);
/// A verified connection to world rank `peer` (its endpoint in `endpoints`), trying each of its
/// addresses; -1 with `why` set when none answers as that rank of this job. Local.
int connect_to(const std::vector<Endpoint>& endpoints, int self, int peer, std::uint64_t token,
               std::string& why);
/// The verified connection of world rank `peer` on `listen_fd`, or -1 after `seconds`. Local.
int accept_from(int listen_fd, int self, int peer, std::uint64_t token, double seconds,
                std::string& why);

/// One connection to a ring neighbour. Sends may come from several threads: the caller
/// serialises queue/flush/close (the monitor's send mutex); receive() is the monitor thread's.
class Connection {
 public:
  Connection(int fd, std::uint64_t token);
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&&) = delete;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }
  /// Queues `bytes` and writes what the socket takes now; a message never goes out in part ahead
  /// of another, so the stream stays whole. False when not queued: the connection is closed, or
  /// `droppable` and the outbox holds more than its cap (a neighbour that does not read). Local.
  bool queue(const std::string& bytes, bool droppable);
  /// Writes what the socket takes of the outbox. Local.
  void flush();
  bool wants_write() const { return fd_ >= 0 && !outbox_.empty(); }
  /// Reads what arrived into the reader; false when the connection closed or failed. `got`: some
  /// bytes came. Local.
  bool receive(bool& got);
  FrameReader& reader() { return reader_; }
  void close();
  /// Bytes the socket took from this connection's outbox. Local.
  std::uint64_t bytes_sent() const { return bytes_sent_; }

 private:
  int fd_ = -1;
  std::string outbox_;
  FrameReader reader_;
  std::uint64_t bytes_sent_ = 0;
};

/// Waits up to `timeout_ms` for every outbox to empty. Caller serialises sends. Local.
void drain_outboxes(std::vector<Connection>& connections, int timeout_ms);

}  // namespace hpctrain::runtime::peer
