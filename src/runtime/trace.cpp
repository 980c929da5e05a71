#include "hpctrain/runtime/trace.hpp"

#include <mutex>

namespace hpctrain::runtime::trace {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {
std::mutex g_mutex;  // guards everything below; taken only while a window is open, or per lane
std::vector<Slice> g_slices;
std::vector<std::string> g_lanes{"main"};
}  // namespace

std::int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

int lane(const std::string& name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (std::size_t i = 0; i < g_lanes.size(); ++i) {
    if (g_lanes[i] == name) return static_cast<int>(i);
  }
  g_lanes.push_back(name);
  return static_cast<int>(g_lanes.size() - 1);
}

void record(int lane, const char* name, Clock::time_point start, Clock::time_point end,
            std::int64_t arg) {
  if (!on()) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_slices.push_back(Slice{lane, name, to_ns(start), to_ns(end), arg});
}

void open() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_slices.clear();
  g_slices.reserve(1 << 14);  // no reallocation inside the first steps of the window
  detail::g_on.store(true);
}

std::vector<Slice> close() {
  detail::g_on.store(false);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<Slice> out;
  out.swap(g_slices);
  return out;
}

std::vector<std::string> lane_names() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_lanes;
}

}  // namespace hpctrain::runtime::trace
