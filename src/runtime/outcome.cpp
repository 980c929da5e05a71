#include "hpctrain/runtime/outcome.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/flight_recorder.hpp"
#include "hpctrain/runtime/json_string.hpp"

namespace hpctrain::runtime {
namespace {

std::mutex g_mutex;
std::string g_path;
std::atomic<std::int64_t> g_step{0};

}  // namespace

void set_outcome_file(const std::string& path, bool remove_old) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_path = path;
  if (remove_old && !path.empty()) std::remove(path.c_str());
}

void set_outcome_step(std::int64_t step) {
  g_step.store(step, std::memory_order_relaxed);
}

void write_outcome(int exit_code, const std::string& reason, int rank) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_path.empty()) return;
  try {
    const auto now = std::chrono::system_clock::now().time_since_epoch();
    char time[32];
    std::snprintf(time, sizeof time, "%.3f", std::chrono::duration<double>(now).count());
    // A lost rank or a hang: where the ranks' flight recorder files are (jobs/train.sbatch says).
    std::string flight;
    if (exit_code == kExitComm || exit_code == kExitHang) {
      const std::string dir = FlightRecorder::directory();
      if (!dir.empty()) flight = ", \"flight\": " + json_quoted(dir);
    }
    const std::string text =
        "{\"exit_code\": " + std::to_string(exit_code) + ", \"reason\": " + json_quoted(reason) +
        ", \"step\": " + std::to_string(g_step.load(std::memory_order_relaxed)) +
        ", \"rank\": " + std::to_string(rank) + ", \"time\": " + time + flight + "}\n";
    const std::string tmp = g_path + ".tmp." + std::to_string(::getpid());
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return;
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool synced = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    std::fclose(f);
    if (ok && synced) {
      std::rename(tmp.c_str(), g_path.c_str());
    } else {
      std::remove(tmp.c_str());
    }
  } catch (...) {
    // The outcome is a courtesy to the caller: the exit code is the record.
  }
}

}  // namespace hpctrain::runtime
