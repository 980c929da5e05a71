#include "fork_server.hpp"

#include <hdf5.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hpctrain::cli {
namespace {

struct ForkRequest {
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<std::string> env;
  std::vector<int> fds;  ///< the child's stdin, stdout and stderr
};

void send_fork_reply(int conn, const nlohmann::json& reply) {
  const std::string line = reply.dump() + "\n";
  std::size_t sent = 0;
  while (sent < line.size()) {
    // MSG_NOSIGNAL: a client that went away is no reason for the handler to die of SIGPIPE.
    ssize_t n = send(conn, line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<std::size_t>(n);
  }
}

// One request line, and the descriptors that came with any part of it.
std::string read_fork_request(int conn, ForkRequest& request) {
  std::string line;
  while (line.find('\n') == std::string::npos) {
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))];
    iovec iov{data, sizeof data};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return "the request ended before its end of line";
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        request.fds.push_back(fd);
      }
    }
    line.append(data, static_cast<std::size_t>(n));
  }
  try {
    const nlohmann::json j = nlohmann::json::parse(line.substr(0, line.find('\n')));
    request.argv = j.at("argv").get<std::vector<std::string>>();
    request.cwd = j.at("cwd").get<std::string>();
    request.env = j.at("env").get<std::vector<std::string>>();
  } catch (const std::exception& e) {
    return std::string("a request is one JSON line with argv, cwd and env: ") + e.what();
  }
  if (request.argv.empty()) return "argv is empty (it starts with the program's name)";
  if (request.fds.size() != 3)
    return "three descriptors (stdin, stdout, stderr) come with a request";
  return "";
}

// In the child: the client's streams, environment and directory, then main.
[[noreturn]] void run_forked_child(MainFunction run, ForkRequest& request, int conn) {
  setpgid(0, 0);
  // Signals as a command started from a shell in the foreground has them (a server started in the
  // background of a script ignores SIGINT and SIGQUIT, and fork keeps that).
  for (int number = 1; number < NSIG; ++number) {
    if (number != SIGKILL && number != SIGSTOP) signal(number, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int stream = 0; stream < 3; ++stream) dup2(request.fds[stream], stream);
  for (int fd : request.fds) close(fd);
  close(conn);
  clearenv();
  for (std::string& entry : request.env) putenv(entry.data());  // kept alive until exit
  if (chdir(request.cwd.c_str()) != 0) {
    std::fprintf(stderr, "fork server: cannot enter %s: %s\n", request.cwd.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  std::vector<char*> argv;
  for (std::string& arg : request.argv) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int code = run(static_cast<int>(request.argv.size()), argv.data());
  // Then the end of a process without its static destructors: LibTorch's deregister every
  // operator, and in a fork they write to (and so copy) every page that loading LibTorch wrote,
  // which cost as much CPU as the fork saved (0.6 of a `--version`'s 0.8 CPU-s). What they would
  // leave unwritten is flushed here: the streams, and HDF5's files (its own exit handler's work).
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  H5close();
  _exit(code);
}

// A connection's handler (a fork of the server): starts the child, waits for it, answers.
int handle_fork_connection(int conn, MainFunction run) {
  ForkRequest request;
  if (std::string problem = read_fork_request(conn, request); !problem.empty()) {
    send_fork_reply(conn, {{"error", problem}});
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    send_fork_reply(conn, {{"error", std::string("fork: ") + std::strerror(errno)}});
    return 1;
  }
  if (child == 0) run_forked_child(run, request, conn);
  setpgid(child, child);  // here too: a kill below must find the group whichever runs first
  for (int fd : request.fds) close(fd);
  send_fork_reply(conn, {{"pid", child}});
  int status = 0;
  for (int wait_ms = 1;; wait_ms = std::min(2 * wait_ms, 20)) {
    if (waitpid(child, &status, WNOHANG) == child) break;
    // The client sends nothing after its request: a readable connection means it went away (it
    // was killed, or its timeout passed), and its command goes with it.
    pollfd client{conn, POLLIN, 0};
    if (poll(&client, 1, wait_ms) > 0) {
      kill(-child, SIGKILL);
      waitpid(child, &status, 0);
      return 0;
    }
  }
  if (WIFSIGNALED(status)) {
    send_fork_reply(conn, {{"signal", WTERMSIG(status)}});
  } else {
    send_fork_reply(conn, {{"exit", WEXITSTATUS(status)}});
  }
  return 0;
}

}  // namespace

int serve_forked_commands(const char* socket_path, MainFunction run) {
  const std::string path = socket_path;  // before unsetenv, which may free it
  // The children are commands as any other: they must not serve in turn.
  unsetenv("HPCTRAIN_TEST_FORK_SERVER");
#ifdef __linux__
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // the test that started the server may die without a word
#endif
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    std::fprintf(stderr, "fork server: socket path '%s' is empty or over %zu bytes\n", path.c_str(),
                 sizeof address.sun_path - 1);
    return 2;
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  unlink(path.c_str());
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 64) != 0) {
    std::fprintf(stderr, "fork server: cannot listen on %s: %s\n", path.c_str(),
                 std::strerror(errno));
    return 2;
  }
  for (;;) {
    pollfd incoming{listener, POLLIN, 0};
    const int ready = poll(&incoming, 1, 1000);
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }  // handlers that ended
    if (ready <= 0) continue;
    const int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    const pid_t handler = fork();
    if (handler == 0) {
      close(listener);
      _exit(handle_fork_connection(conn, run));
    }
    close(conn);
  }
}

}  // namespace hpctrain::cli
