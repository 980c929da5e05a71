#include "hpctrain/runtime/trace.hpp"

#include <algorithm>
#include <mutex>

namespace hpctrain::runtime::trace {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {
std::mutex g_mutex;  // guards everything below; taken only while a window is open, or per lane
std::vector<Slice> g_slices;
std::vector<std::string> g_lanes{"main"};
std::mutex g_sources_mutex;  // guards g_sources; never held together with g_mutex
std::vector<DeferredSource*> g_sources;
}  // namespace

void add_source(DeferredSource* source) {
  std::lock_guard<std::mutex> lock(g_sources_mutex);
  g_sources.push_back(source);
}

void remove_source(DeferredSource* source) {
  std::lock_guard<std::mutex> lock(g_sources_mutex);
  g_sources.erase(std::remove(g_sources.begin(), g_sources.end(), source), g_sources.end());
}

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

std::vector<Slice> place_device_timings(int lane, const std::vector<DeviceTiming>& ops,
                                        double reference_ns) {
  std::vector<Slice> out;
  out.reserve(ops.size());
  std::int64_t previous_end = 0;
  for (const DeviceTiming& op : ops) {
    const auto started = static_cast<std::int64_t>(reference_ns - 1e6 * op.start_before_ms);
    const auto ended = static_cast<std::int64_t>(reference_ns - 1e6 * op.end_before_ms);
    const std::int64_t begin = std::max({op.launch_ns, started, previous_end});
    const std::int64_t end = std::max(ended, begin);
    previous_end = end;
    out.push_back(Slice{lane, op.name, begin, end, op.bytes});
  }
  return out;
}

void open() {
  {
    std::lock_guard<std::mutex> lock(g_sources_mutex);
    for (DeferredSource* source : g_sources) source->discard();
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_slices.clear();
  g_slices.reserve(1 << 14);  // no reallocation inside the first steps of the window
  detail::g_on.store(true);
}

std::vector<Slice> close() {
  detail::g_on.store(false);
  std::vector<Slice> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(g_slices);
  }
  std::lock_guard<std::mutex> lock(g_sources_mutex);
  for (DeferredSource* source : g_sources) source->resolve(out);
  return out;
}

std::vector<std::string> lane_names() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_lanes;
}

}  // namespace hpctrain::runtime::trace
