// The test suite's fork client: runs a command line in a fork of a fork server (hpctrain's,
// src/cli/fork_server.hpp, or the Python references', tests/support/python_fork_server.py) as if
// this process ran it:
//     HPCTRAIN_TEST_FORK_SERVER=SOCKET fork_client PROGRAM ARGS...
//     HPCTRAIN_TEST_FORK_SERVER=SOCKET mpirun -np N fork_client PROGRAM ARGS...
// The command gets this process's directory, environment (less HPCTRAIN_TEST_FORK_SERVER) and
// standard streams; SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1 and SIGUSR2 are forwarded to
// it, and the client ends as it ended (its exit code, or the same signal). A client killed outright
// takes its command with it (the server kills it when the connection closes). Exit 127 with a
// message when the server cannot be reached or refuses the request.
// A C++ program because the suite starts about 1,300 clients: a Python client cost 0.04-0.1
// CPU-seconds each (docs/BENCHMARKS.md, "The test suite"), this one a few milliseconds.
// tests/support/forked_hpctrain.py speaks the same protocol from Python (fuzz.py,
// docs_examples.py).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern char** environ;

namespace {

volatile sig_atomic_t child_pid = 0;

void forward(int number) {
  if (child_pid > 0) kill(static_cast<pid_t>(child_pid), number);
}

void append_json_string(std::string& out, const char* text) {
  out += '"';
  for (const unsigned char* p = reinterpret_cast<const unsigned char*>(text); *p; ++p) {
    if (*p == '"' || *p == '\\') {
      out += '\\';
      out += static_cast<char>(*p);
    } else if (*p < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", *p);
      out += escaped;
    } else {
      out += static_cast<char>(*p);
    }
  }
  out += '"';
}

[[noreturn]] void give_up(const std::string& why) {
  std::fprintf(stderr, "fork_client: %s\n", why.c_str());
  std::exit(127);
}

// Reads one line from the connection (the server's answers are short JSON lines).
bool read_line(int fd, std::string& line) {
  line.clear();
  char c;
  while (true) {
    ssize_t n = read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line += c;
  }
}

// The integer after "key": in a one-level JSON object, or false when the key is absent.
bool json_int(const std::string& line, const char* key, long& value) {
  std::string quoted = std::string("\"") + key + "\"";
  auto at = line.find(quoted);
  if (at == std::string::npos) return false;
  at = line.find(':', at + quoted.size());
  if (at == std::string::npos) return false;
  value = std::strtol(line.c_str() + at + 1, nullptr, 10);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const char* socket_path = std::getenv("HPCTRAIN_TEST_FORK_SERVER");
  if (!socket_path || !*socket_path || argc < 2)
    give_up("usage: HPCTRAIN_TEST_FORK_SERVER=SOCKET fork_client PROGRAM ARGS...");
  std::string request = "{\"argv\": [";
  for (int i = 1; i < argc; ++i) {
    if (i > 1) request += ", ";
    append_json_string(request, argv[i]);
  }
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) give_up(std::string("getcwd: ") + std::strerror(errno));
  request += "], \"cwd\": ";
  append_json_string(request, cwd);
  request += ", \"env\": [";
  bool first = true;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "HPCTRAIN_TEST_FORK_SERVER=", 26) == 0) continue;
    if (!first) request += ", ";
    first = false;
    append_json_string(request, *e);
  }
  request += "]}\n";

  int conn = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (std::strlen(socket_path) >= sizeof address.sun_path) give_up("socket path too long");
  std::strcpy(address.sun_path, socket_path);
  if (conn < 0 || connect(conn, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
    give_up(std::string("cannot reach the fork server at ") + socket_path + ": " +
            std::strerror(errno));
  // The first byte carries the three descriptors, the rest follows.
  int fds[3] = {0, 1, 2};
  char control[CMSG_SPACE(sizeof fds)] = {};
  iovec first_byte{request.data(), 1};
  msghdr message{};
  message.msg_iov = &first_byte;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof fds);
  std::memcpy(CMSG_DATA(header), fds, sizeof fds);
  if (sendmsg(conn, &message, 0) != 1) give_up(std::string("sendmsg: ") + std::strerror(errno));
  for (size_t sent = 1; sent < request.size();) {
    ssize_t n = write(conn, request.data() + sent, request.size() - sent);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) give_up(std::string("write: ") + std::strerror(errno));
    sent += static_cast<size_t>(n);
  }

  for (int number : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGALRM, SIGUSR1, SIGUSR2}) {
    struct sigaction action {};
    action.sa_handler = forward;
    sigemptyset(&action.sa_mask);
    sigaction(number, &action, nullptr);  // no SA_RESTART: read_line retries on EINTR itself
  }
  std::string line;
  long value = 0;
  if (!read_line(conn, line) || !json_int(line, "pid", value))
    give_up("the fork server refused the request: " + (line.empty() ? "no answer" : line));
  child_pid = static_cast<sig_atomic_t>(value);
  if (!read_line(conn, line)) give_up("the fork server ended without an answer");
  if (json_int(line, "exit", value)) return static_cast<int>(value);
  if (json_int(line, "signal", value)) {
    signal(static_cast<int>(value), SIG_DFL);
    kill(getpid(), static_cast<int>(value));
    return 128 + static_cast<int>(value);
  }
  give_up("the fork server answered: " + line);
}
