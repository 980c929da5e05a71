#include "peer_transport.hpp"

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
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::runtime::peer {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes waiting for a neighbour that does not read (stopped) are capped; positions beyond the
// cap are dropped (newer ones follow), other messages are kept.
constexpr std::size_t kOutboxCap = 8u << 20;

int ms_left(Clock::time_point deadline) {
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

// send_message: the whole message or nothing useful; never blocks past `timeout_ms`.
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
      const int left = ms_left(deadline);
      if (left <= 0) return false;
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, left);
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
    const int left = ms_left(deadline);
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left);
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

// A connected socket to `address`:`port` within 3 s, or -1 with `why`.
int connect_address(std::uint32_t address, std::uint32_t port, std::string& why) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    why = str("socket(): ", std::strerror(errno));
    return -1;
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = address;
  to.sin_port = static_cast<in_port_t>(port);
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
    why = str("connecting to ", ip_text(address), ":", ntohs(static_cast<in_port_t>(port)), ": ",
              std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string ip_text(std::uint32_t address) {
  char text[INET_ADDRSTRLEN] = {0};
  in_addr a{};
  a.s_addr = address;
  inet_ntop(AF_INET, &a, text, sizeof(text));
  return text;
}

Endpoint local_endpoint(std::uint16_t port, const std::string& host, const std::string& node) {
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
  std::snprintf(e.node, sizeof(e.node), "%s", node.c_str());
  return e;
}

int listen_any(std::uint16_t& port, std::string& why) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t length = sizeof(any);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0 ||
      ::listen(fd, 16) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&any), &length) != 0) {
    why = str("cannot listen on a TCP port: ", std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return -1;
  }
  port = ntohs(any.sin_port);
  return fd;
}

// The handshake guards against an address that reaches another process on this host (a shared
// private address such as a container bridge): only the right rank of this job answers with the
// token.
int connect_to(const std::vector<Endpoint>& endpoints, int self, int peer, std::uint64_t token,
               std::string& why) {
  const Endpoint& e = endpoints[static_cast<std::size_t>(peer)];
  const bool same_host = std::string(e.host) == endpoints[static_cast<std::size_t>(self)].host;
  for (std::uint32_t i = 0; i < e.address_count; ++i) {
    const std::uint32_t address = e.addresses[i];
    if (ntohl(address) >> 24 == 127 && !same_host) continue;
    const int fd = connect_address(address, e.port, why);
    if (fd < 0) {
      if (why.rfind("socket()", 0) == 0) return -1;
      continue;
    }
    Message hello = make_message(kHello, self, token);
    hello.subject = static_cast<std::uint32_t>(peer);
    Message ack;
    if (send_message(fd, hello, 3000) && recv_message(fd, ack, 10000) && ack.type == kHelloAck &&
        ack.token == token && ack.from == static_cast<std::uint32_t>(peer)) {
      tune_socket(fd);
      return fd;
    }
    why = str(ip_text(address), ":", ntohs(static_cast<in_port_t>(e.port)),
              " did not answer as rank ", peer, " of this job");
    ::close(fd);
  }
  return -1;
}

int accept_from(int listen_fd, int self, int peer, std::uint64_t token, double seconds,
                std::string& why) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  while (Clock::now() < deadline) {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, std::max(1, ms_left(deadline))) <= 0) continue;
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    Message hello;
    if (recv_message(fd, hello, 3000) && hello.type == kHello && hello.token == token &&
        hello.from == static_cast<std::uint32_t>(peer) &&
        hello.subject == static_cast<std::uint32_t>(self)) {
      if (send_message(fd, make_message(kHelloAck, self, token), 3000)) {
        tune_socket(fd);
        return fd;
      }
    }
    ::close(fd);  // not our predecessor (another job, a stray connection): keep waiting
  }
  why = str("rank ", peer, " did not connect within ", format_seconds(seconds));
  return -1;
}

Connection::Connection(int fd, std::uint64_t token) : fd_(fd), reader_(token) {}

Connection::~Connection() {
  close();
}

Connection::Connection(Connection&& other) noexcept
    : fd_(other.fd_),
      outbox_(std::move(other.outbox_)),
      reader_(std::move(other.reader_)),
      bytes_sent_(other.bytes_sent_) {
  other.fd_ = -1;
}

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Connection::flush() {
  while (!outbox_.empty() && fd_ >= 0) {
    ssize_t n = ::send(fd_, outbox_.data(), outbox_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      bytes_sent_ += static_cast<std::uint64_t>(n);
      outbox_.erase(0, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return;  // full (the rest goes when poll says writable) or failed (the reader notices)
  }
}

bool Connection::queue(const std::string& bytes, bool droppable) {
  if (fd_ < 0) return false;
  if (droppable && outbox_.size() + bytes.size() > kOutboxCap) return false;
  outbox_ += bytes;
  flush();
  return true;
}

bool Connection::receive(bool& got) {
  got = false;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    got = true;
    reader_.append(buffer, static_cast<std::size_t>(n));
  }
}

void drain_outboxes(std::vector<Connection>& connections, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    std::vector<pollfd> fds;
    for (Connection& c : connections) {
      c.flush();
      if (c.wants_write()) fds.push_back(pollfd{c.fd(), POLLOUT, 0});
    }
    if (fds.empty()) return;
    const int left = ms_left(deadline);
    if (left <= 0) return;
    ::poll(fds.data(), fds.size(), left);
  }
}

}  // namespace hpctrain::runtime::peer
