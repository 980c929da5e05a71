#include "hpctrain/runtime/stop_signals.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

#include "hpctrain/runtime/error.hpp"

namespace hpctrain::runtime {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_exit_mode = 1;  // StopMode::kExit until the step loop says otherwise
char g_what[64] = "hpctrain";
volatile std::sig_atomic_t g_abort_rank = -1;  // note_job_abort: the rank that ended the job
volatile std::sig_atomic_t g_abort_code = 0;
volatile std::sig_atomic_t g_agreed_code = -1;  // note_agreed_exit: this rank's agreed exit code

// Appends `text` to `buffer` (of `size` bytes, `used` of them filled). Async-signal-safe.
void append(char* buffer, std::size_t size, std::size_t& used, const char* text) {
  for (; *text != '\0' && used + 1 < size; ++text) buffer[used++] = *text;
  buffer[used] = '\0';
}

// Appends the decimal digits of `value` (>= 0). Async-signal-safe.
void append_number(char* buffer, std::size_t size, std::size_t& used, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0 && n < 23);
  char text[24];
  for (int i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  text[n] = '\0';
  append(buffer, size, used, text);
}

// Ends the process at once: one line on stderr, then _exit (no destructors, no MPI_Finalize: a
// rank blocked in open(2) of a FIFO or in a collective cannot be unwound). Async-signal-safe.
[[noreturn]] void exit_now(int signal_number) {
  // An agreed error is on its way out of every rank, reported once by rank 0: nothing to add.
  if (g_agreed_code >= 0) ::_exit(g_agreed_code);
  char line[256];
  std::size_t used = 0;
  append(line, sizeof line, used, "[hpctrain] ");
  append(line, sizeof line, used, g_what);
  append(line, sizeof line, used, ": ");
  if (g_abort_rank >= 0) {
    // The launcher ends every rank after one rank's error: that rank printed it; this one has
    // nothing to add but why it stops, and the job's code.
    const int code = g_abort_code;
    append(line, sizeof line, used, "ended by the launcher after rank ");
    append_number(line, sizeof line, used, g_abort_rank);
    append(line, sizeof line, used, "'s error (exit ");
    append_number(line, sizeof line, used, code);
    append(line, sizeof line, used, ", reported above)\n");
    ssize_t ignored = ::write(STDERR_FILENO, line, used);
    (void)ignored;
    ::_exit(code);
  }
  append(line, sizeof line, used, signal_name(signal_number));
  append(line, sizeof line, used,
         " received outside the training step loop: nothing to save, exiting now with 75 "
         "(requeue to resume or rerun)\n");
  ssize_t ignored = ::write(STDERR_FILENO, line, used);
  (void)ignored;
  ::_exit(kExitRequeue);
}

extern "C" void on_stop_signal(int signal_number) {
  if (g_exit_mode) exit_now(signal_number);
  // Only the flag: anything else (I/O, allocation, MPI) is not async-signal-safe.
  g_stop_signal = signal_number;
}

}  // namespace

void install_stop_signal_handlers(const char* what) {
  std::strncpy(g_what, what, sizeof g_what - 1);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // do not interrupt HDF5/MPI system calls with EINTR
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &action, nullptr);
}

void set_stop_mode(StopMode mode) {
  g_exit_mode = mode == StopMode::kExit ? 1 : 0;
}

StopMode stop_mode() {
  return g_exit_mode ? StopMode::kExit : StopMode::kAgree;
}

int stop_signal_received() {
  return g_stop_signal;
}

void request_stop(int signal_number) {
  g_stop_signal = signal_number;
}

void clear_stop_request() {
  g_stop_signal = 0;
}

void note_job_abort(int world_rank, int exit_code) {
  if (g_abort_rank >= 0 || world_rank < 0) return;
  g_abort_code = exit_code;
  g_abort_rank = world_rank;
}

void note_agreed_exit(int exit_code) {
  g_agreed_code = exit_code;
}

int agreed_exit_code() {
  return g_agreed_code;
}

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case 0: return "none";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGALRM: return "SIGALRM";
    default: return "signal";
  }
}

}  // namespace hpctrain::runtime
