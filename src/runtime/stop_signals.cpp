#include "hpctrain/runtime/stop_signals.hpp"

#include <csignal>

namespace hpctrain::runtime {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int signal_number) {
  // Only the flag: anything else (I/O, allocation, MPI) is not async-signal-safe.
  g_stop_signal = signal_number;
}

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // do not interrupt HDF5/MPI system calls with EINTR
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) sigaction(sig, &action, nullptr);
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
