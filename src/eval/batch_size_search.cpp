#include "hpctrain/eval/batch_size_search.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/clock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {
namespace {

using Clock = std::chrono::steady_clock;

using runtime::seconds_since;

// Resident bytes now (/proc/self/statm) and the peak so far (getrusage, KiB on Linux).
std::uint64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint64_t peak_resident_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

bool is_out_of_memory(const std::exception& e) {
  const std::string what = e.what();
  return what.find("out of memory") != std::string::npos ||
         what.find("DefaultCPUAllocator: can't allocate") != std::string::npos ||
         dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
}

// One forward pass and loss of `inputs` (inference mode, optional bf16 autocast).
void run_batch(model::Model& model, const torch::Tensor& inputs, const torch::Tensor& targets,
               Precision precision) {
  compat::AutocastScope autocast(precision == Precision::kBf16, inputs.device());
  auto outputs = model.forward(inputs);
  autocast.end();
  model.loss(outputs, targets).resolve();  // reads the sums: waits for the device
}

}  // namespace

std::uint64_t default_memory_budget(int local_ranks) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == "MemAvailable:") {
      return kib * 1024 / 2 / static_cast<std::uint64_t>(std::max(1, local_ranks));
    }
  }
  return 0;
}

BatchSearchResult search_batch_size(model::Model& model, data::Dataset& dataset,
                                    comm::ControlPlane& dp, comm::ControlPlane& world,
                                    const BatchSearchOptions& options) {
  BatchSearchResult result;
  const std::int64_t samples =
      std::max<std::int64_t>(1, options.samples > 0 ? options.samples : dataset.info().num_samples);
  const auto device =
      model.parameters().empty() ? torch::Device(torch::kCPU) : model.parameters().front().device();
  const bool was_training = model.is_training();
  model.eval();
  torch::InferenceMode inference;
  // Freed activations stay in the heap (see runtime::tune_malloc), so the growth of the peak over
  // the resident size at the start is the footprint of the largest batch so far.
  const std::uint64_t baseline = resident_bytes();
  double best = 0;
  int worse_in_a_row = 0;
  std::int64_t batch = std::max<std::int64_t>(1, options.min_batch);
  for (;; batch *= 2) {
    const std::int64_t size = std::min(batch, samples);
    BatchTrial trial;
    trial.batch = size;
    bool out_of_memory = false;
    double seconds = 0;
    std::uint64_t input_bytes = 0;
    try {
      data::Batch data = dataset.read_range(0, std::min(size, dataset.info().num_samples));
      auto inputs = data.inputs.to(device);
      auto targets = data.targets.to(device);
      input_bytes = static_cast<std::uint64_t>(inputs.nbytes());
      run_batch(model, inputs, targets, options.precision);  // warm-up: first touch of new buffers
      int timed = 0;
      const auto start = Clock::now();
      while (timed < 2 || seconds_since(start) < options.seconds_per_size) {
        run_batch(model, inputs, targets, options.precision);
        ++timed;
      }
      seconds = seconds_since(start) / timed;
    } catch (const std::exception& e) {
      if (!is_out_of_memory(e)) throw;
      out_of_memory = true;
    }
    const std::uint64_t peak = peak_resident_bytes();
    // At least the batch itself, when the peak did not move (small batches reuse freed memory).
    const std::uint64_t grown = std::max(peak > baseline ? peak - baseline : 0, input_bytes);
    // Slowest batch time, largest memory and any out-of-memory over every rank.
    std::vector<double> facts{seconds, static_cast<double>(grown), out_of_memory ? 1.0 : 0.0};
    world.reduce(facts, comm::ReduceOp::kMax);
    if (facts[2] > 0) {
      result.stop_reason = str("batch ", size, " ran out of memory on some rank");
      break;
    }
    trial.batch_seconds = facts[0];
    trial.memory_bytes = static_cast<std::uint64_t>(facts[1]);
    // The busiest rank gets ceil(batches / dp) canonical batches.
    const std::int64_t batches = (samples + size - 1) / size;
    const std::int64_t per_rank = (batches + dp.size() - 1) / dp.size();
    trial.samples_per_second =
        trial.batch_seconds > 0
            ? static_cast<double>(samples) / (static_cast<double>(per_rank) * trial.batch_seconds)
            : 0;
    result.trials.push_back(trial);
    if (trial.samples_per_second > best) {
      best = trial.samples_per_second;
      result.chosen = size;
      worse_in_a_row = 0;
    } else if (trial.samples_per_second < 0.9 * best && ++worse_in_a_row >= 2) {
      result.stop_reason = "throughput fell for two sizes in a row";
      break;
    }
    if (size >= samples) {
      result.stop_reason = str("batch ", size, " covers all ", samples, " samples");
      break;
    }
    if (batch * 2 > options.max_batch) {
      result.stop_reason = str("largest batch tried (", options.max_batch, ")");
      break;
    }
    // Activation memory grows linearly with the batch: the next size needs about twice as much.
    if (options.memory_budget > 0 && !device.is_cuda() &&
        2 * trial.memory_bytes > options.memory_budget) {
      result.stop_reason =
          str("batch ", batch * 2, " would need about ",
              format_bytes(2.0 * static_cast<double>(trial.memory_bytes)), ", over the budget of ",
              format_bytes(static_cast<double>(options.memory_budget)), " per rank");
      break;
    }
  }
  if (was_training) model.train();
  if (result.chosen == 0) {
    throw Error(str("--batch-size auto: not even a batch of ", options.min_batch, " fits (",
                    result.stop_reason, "); pass a smaller --batch-size"));
  }
  if (!result.trials.empty()) {
    for (auto& t : result.trials) {
      if (t.batch == result.chosen) t.note = "chosen";
    }
  }
  return result;
}

std::string format_trials(const BatchSearchResult& result) {
  std::ostringstream out;
  char line[160];
  std::snprintf(line, sizeof line, "  %8s %12s %14s %12s\n", "batch", "batch time", "samples/s",
                "memory");
  out << line;
  for (const auto& t : result.trials) {
    std::snprintf(line, sizeof line, "  %8lld %12s %14.0f %12s  %s\n",
                  static_cast<long long>(t.batch), format_seconds(t.batch_seconds).c_str(),
                  t.samples_per_second, format_bytes(static_cast<double>(t.memory_bytes)).c_str(),
                  t.note.c_str());
    out << line;
  }
  out << "  stopped: " << result.stop_reason;
  return out.str();
}

}  // namespace hpctrain::eval
