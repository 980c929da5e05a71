#include "trace_session.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "hpctrain/build_config.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "run_files.hpp"

namespace hpctrain::train {
namespace {

namespace trace = runtime::trace;
constexpr double kBytesPerSlice = 130;

std::string host_name() {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  return host;
}

// Microseconds with nanosecond digits, as the Trace Event Format's ts and dur are read.
std::string micros(double ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3f", ns / 1000.0);
  return buf;
}

}  // namespace

std::int64_t trace_slices_per_step(std::int64_t micro_batches, std::int64_t buckets,
                                   std::int64_t tp_collectives) {
  return 6 + 3 * micro_batches + buckets + tp_collectives;
}

double trace_bytes_estimate(const StepWindow& window, int world_size,
                            std::int64_t slices_per_step) {
  return kBytesPerSlice * static_cast<double>(slices_per_step) * static_cast<double>(window.steps) *
         world_size;
}

TraceSession::TraceSession(const StepWindow& window, double max_mb, std::int64_t slices_per_step,
                           std::string run_dir, comm::ControlPlane& world)
    : window_(window), run_dir_(std::move(run_dir)), max_bytes_(max_mb * 1048576.0) {
  if (window_.steps <= 0) return;
  if (!HPCTRAIN_TRACE_HOOKS) {
    throw AgreedConfigError(
        "logging.trace: this hpctrain was configured with -DHPCTRAIN_TRACE_HOOKS=OFF, which "
        "compiles the timeline's recording points out (for measuring them); build with it ON "
        "(the default) to trace, or drop logging.trace");
  }
  const double estimate = trace_bytes_estimate(window_, world.size(), slices_per_step);
  if (estimate > max_bytes_) {
    throw AgreedConfigError(str("logging.trace: ", window_.steps, " steps x ", world.size(),
                                " ranks x about ", slices_per_step,
                                " slices per step would write about ", format_bytes(estimate),
                                " to trace.json, more than logging.trace_max_mb = ", max_mb,
                                ": trace fewer steps (logging.trace.steps) or raise "
                                "logging.trace_max_mb"));
  }
  // Clock offsets: every rank leaves a barrier at nearly the same moment; the median over a few
  // rounds of (my clock - rank 0's clock) at that moment is this rank's offset. Ranks of one node
  // share the steady clock, so there it measures only the barrier's exit skew.
  std::vector<double> offsets;
  for (int round = 0; round < 7; ++round) {
    world.barrier();
    const double now = static_cast<double>(trace::to_ns(trace::Clock::now()));
    const std::vector<double> all = world.all_gather(now);
    offsets.push_back(now - all[0]);
  }
  std::sort(offsets.begin(), offsets.end());
  offset_ns_ = offsets[offsets.size() / 2];
}

void TraceSession::before_step(std::int64_t step) {
  if (written_ || open_ || !window_.contains(step)) return;
  trace::open();
  open_ = true;
}

void TraceSession::after_step(std::int64_t step, comm::ControlPlane& world,
                              const std::function<void()>& settle) {
  if (!open_ || step < window_.start_step + window_.steps - 1) return;
  if (settle) settle();
  write(world);
}

void TraceSession::finish(comm::ControlPlane& world) {
  if (open_) write(world);
}

void TraceSession::write(comm::ControlPlane& world) {
  std::vector<trace::Slice> slices = trace::close();
  open_ = false;
  written_ = true;
  const std::vector<std::string> lanes = trace::lane_names();
  const int world_rank = world.rank();
  // The size bound holds whatever the estimate missed: each rank keeps its share.
  const auto cap = static_cast<std::size_t>(max_bytes_ / kBytesPerSlice / world.size());
  const bool cut = slices.size() > cap;
  if (cut) slices.resize(cap);
  std::sort(slices.begin(), slices.end(), [](const trace::Slice& a, const trace::Slice& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  // Rank 0's clock at the window's first slice anywhere is time 0 (the minimum over ranks).
  double first = slices.empty() ? 1e300 : static_cast<double>(slices.front().start_ns) - offset_ns_;
  first = world.min(first);

  std::string text;
  const std::string pid = std::to_string(world_rank);
  nlohmann::json meta = nlohmann::json::array();
  meta.push_back({{"ph", "M"},
                  {"pid", world_rank},
                  {"name", "process_name"},
                  {"args", {{"name", str("rank ", world_rank, " (", host_name(), ")")}}}});
  meta.push_back({{"ph", "M"},
                  {"pid", world_rank},
                  {"name", "process_sort_index"},
                  {"args", {{"sort_index", world_rank}}}});
  std::vector<bool> used(lanes.size(), false);
  for (const auto& s : slices) {
    if (s.lane >= 0 && static_cast<std::size_t>(s.lane) < used.size()) used[s.lane] = true;
  }
  used[0] = true;
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (!used[i]) continue;
    meta.push_back({{"ph", "M"},
                    {"pid", world_rank},
                    {"tid", i},
                    {"name", "thread_name"},
                    {"args", {{"name", lanes[i]}}}});
    meta.push_back({{"ph", "M"},
                    {"pid", world_rank},
                    {"tid", i},
                    {"name", "thread_sort_index"},
                    {"args", {{"sort_index", i}}}});
  }
  for (const auto& m : meta) text += m.dump() + ",\n";
  for (const auto& s : slices) {
    const double start = static_cast<double>(s.start_ns) - offset_ns_ - first;
    text += str("{\"ph\":\"X\",\"pid\":", pid, ",\"tid\":", s.lane,
                ",\"name\":", nlohmann::json(s.name).dump(), ",\"ts\":", micros(start),
                ",\"dur\":", micros(static_cast<double>(s.end_ns - s.start_ns)));
    if (s.arg >= 0) {
      // Pipeline stages name their forwards and backwards by micro-batch.
      const std::string name = s.name;
      const char* key = name == "step"                            ? "step"
                        : name == "forward" || name == "backward" ? "micro_batch"
                                                                  : "value";
      text += str(",\"args\":{\"", key, "\":", s.arg, "}");
    }
    text += "},\n";
  }
  const std::vector<std::int64_t> lengths =
      world.all_gather(static_cast<std::int64_t>(text.size()));
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  text.resize(static_cast<std::size_t>(longest), ' ');
  const std::vector<std::uint8_t> all = world.gather_bytes(text.data(), text.size());
  const std::vector<double> offsets = world.all_gather(offset_ns_);
  const std::vector<std::int64_t> cuts = world.all_gather(static_cast<std::int64_t>(cut));
  if (world_rank != 0) return;

  std::string out = "{\"traceEvents\":[\n";
  for (int r = 0; r < world.size(); ++r) {
    out.append(reinterpret_cast<const char*>(all.data()) + r * longest,
               static_cast<std::size_t>(lengths[r]));
  }
  nlohmann::json info{{"start_step", window_.start_step},
                      {"steps", window_.steps},
                      {"world_size", world.size()},
                      {"clock", "steady clock of each rank, aligned to rank 0's"},
                      {"clock_offsets_us", nlohmann::json::array()},
                      {"truncated_ranks", nlohmann::json::array()}};
  for (int r = 0; r < world.size(); ++r) {
    info["clock_offsets_us"].push_back(offsets[r] / 1000.0);
    if (cuts[r] != 0) info["truncated_ranks"].push_back(r);
  }
  // A final metadata event closes the array without a trailing comma.
  out +=
      nlohmann::json({{"ph", "M"}, {"pid", 0}, {"name", "hpctrain_trace"}, {"args", info}}).dump();
  out += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":" + info.dump() + "}\n";
  path_ = run_dir_ + "/trace.json";
  const std::string problem = write_run_file(path_, out);
  if (!problem.empty()) {
    log::warn(str("trace not written: ", problem));
    path_.clear();
    return;
  }
  log::info(str("trace of steps ", window_.start_step, "..", window_.start_step + window_.steps - 1,
                " written to ", path_, " (", format_bytes(static_cast<double>(out.size())),
                "; `hpctrain trace summary ", run_dir_, "` sums it up)"));
}

}  // namespace hpctrain::train
