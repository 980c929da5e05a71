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
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

extern char** environ;

namespace {

volatile sig_atomic_t child_pid = 0;

void forward(int number) {
  if (child_pid > 0) kill(static_cast<pid_t>(child_pid), number);
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

}  // namespace

int main(int argc, char** argv) {
  const char* socket_path = std::getenv("HPCTRAIN_TEST_FORK_SERVER");
  if (!socket_path || !*socket_path || argc < 2)
    give_up("usage: HPCTRAIN_TEST_FORK_SERVER=SOCKET fork_client PROGRAM ARGS...");
  char cwd[4096];
  if (!getcwd(cwd, sizeof cwd)) give_up(std::string("getcwd: ") + std::strerror(errno));
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "HPCTRAIN_TEST_FORK_SERVER=", 26) != 0) env.emplace_back(*e);
  const std::string request =
      nlohmann::json{
          {"argv", std::vector<std::string>(argv + 1, argv + argc)}, {"cwd", cwd}, {"env", env}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";

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
  iovec first_byte{const_cast<char*>(request.data()), 1};
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
  // The answers: {"pid": N}, then {"exit": CODE} or {"signal": NUMBER} ({"error": TEXT} instead).
  std::string line;
  auto answer = [&] {
    return read_line(conn, line) ? nlohmann::json::parse(line, nullptr, false) : nlohmann::json();
  };
  nlohmann::json reply = answer();
  if (!reply.is_object() || !reply.contains("pid"))
    give_up("the fork server refused the request: " + (line.empty() ? "no answer" : line));
  child_pid = reply["pid"].get<int>();
  reply = answer();
  if (reply.is_object() && reply.contains("exit")) return reply["exit"].get<int>();
  if (reply.is_object() && reply.contains("signal")) {
    const int number = reply["signal"].get<int>();
    signal(number, SIG_DFL);
    kill(getpid(), number);
    return 128 + number;
  }
  give_up("the fork server answered: " + (line.empty() ? "nothing" : line));
}
