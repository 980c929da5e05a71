#include "hpctrain/checkpoint/checkpoint_manager.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/clock.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"
#include "hpctrain/runtime/watchdog.hpp"
#include "manager_impl.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint {
namespace {

using Clock = std::chrono::steady_clock;

using runtime::seconds_since;

// What is wrong with a writer's records, or empty. `tp_size` checks the local shapes against the
// sharding rule.
std::string check_records(std::vector<TensorRecord>& records, int tp_size, bool copy) {
  std::set<std::string> names;
  std::map<std::string, std::set<std::string>> paths;  // file -> dataset paths
  for (TensorRecord& r : records) {
    try {
      const TensorLocation loc = tensor_location(r.name);
      if (!names.insert(r.name).second) return str("tensor record '", r.name, "' appears twice");
      paths[loc.file].insert(loc.dataset);
      if (!r.local.defined()) return str("tensor record '", r.name, "' has no tensor");
      h5::dtype_name(r.local.scalar_type(), str("tensor record '", r.name, "'"));
      if (!copy && !r.local.is_cpu()) {
        return str("tensor record '", r.name, "' is on ", r.local.device(),
                   ": pass CPU copies, or set SaveContent::copy so that save() copies it");
      }
      normalize_shard(r);
      const auto& logical = r.shard.logical_shape;
      const int d = r.shard.split_dim;
      if (d < -1 || d >= static_cast<int>(logical.size()) ||
          (!logical.empty() && r.local.dim() != static_cast<std::int64_t>(logical.size())) ||
          (logical.empty() && r.local.dim() != 0)) {
        return str("tensor record '", r.name, "': local shape ", r.local.sizes(),
                   " does not fit logical shape ", slab::shape_text(logical), " with split_dim ",
                   d);
      }
      const auto expected = parallel::local_shape({logical, d}, tp_size);
      if (r.local.sizes().vec() != expected) {
        return str("tensor record '", r.name, "': local shape ", r.local.sizes(),
                   " but logical shape ", slab::shape_text(logical), " split along dim ", d,
                   " over ", tp_size, " tp ranks gives ", slab::shape_text(expected),
                   " (tensor_parallel_shard.hpp)");
      }
    } catch (const CheckpointError& e) {
      return e.what();
    }
  }
  // HDF5 cannot hold both a dataset "/a" and a dataset "/a/b".
  for (const auto& [file, set] : paths) {
    for (const std::string& p : set) {
      auto next = set.upper_bound(p);
      if (next != set.end() && next->compare(0, p.size() + 1, p + "/") == 0) {
        return str("tensor records: ", file, " would need ", p, " as both a dataset and a group (",
                   *next, "): rename one");
      }
    }
  }
  return {};
}

// A fingerprint of what the records are (names, dtypes, logical shapes, split dims), equal on
// every tp rank when they agree.
std::uint64_t fingerprint(const std::vector<TensorRecord>& records) {
  std::vector<std::string> lines;
  for (const TensorRecord& r : records) {
    lines.push_back(str(r.name, "|", r.local.defined() ? c10::toString(r.local.scalar_type()) : "",
                        "|", slab::shape_text(r.shard.logical_shape), "|", r.shard.split_dim));
  }
  std::sort(lines.begin(), lines.end());
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return XXH3_64bits(all.data(), all.size());
}

std::string unique_token(int sequence) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now).count();
  char text[64];
  std::snprintf(text, sizeof text, "%llx%x%x", static_cast<unsigned long long>(ns),
                static_cast<unsigned>(::getpid()), static_cast<unsigned>(sequence));
  return text;
}

}  // namespace

void CheckpointManager::Impl::ensure_comms() {
  if (world) return;
  world = grid_world->duplicate();
  tp = grid_tp->duplicate();
  model = grid_model->duplicate();
  ctx.writers = model.get();
}

void CheckpointManager::Impl::agree(const std::string& problem) {
  auto first = world->first_problem(problem);
  if (!first) return;
  const auto& [rank, message] = *first;
  throw CheckpointError(rank == 0 ? message : str("world rank ", rank, ": ", message));
}

void CheckpointManager::Impl::finish_pending() {
  if (!pending) return;
  if (worker.joinable()) worker.join();
  pending = false;
  std::string text;
  if (ctx.world_rank == 0) {
    text = nlohmann::json{{"error", result.error},
                          {"seconds", result.seconds},
                          {"bytes", result.bytes},
                          {"path", result.path}}
               .dump();
  }
  const auto outcome = nlohmann::json::parse(world->broadcast(text));
  const std::string error = outcome.at("error").get<std::string>();
  // Every rank throws it (they all got it from world rank 0): reported once, by rank 0.
  if (!error.empty()) throw AgreedCheckpointError(error);
  last_save_seconds = outcome.at("seconds").get<double>();
  last_bytes = outcome.at("bytes").get<std::int64_t>();
  last_path = outcome.at("path").get<std::string>();
}

void CheckpointManager::Impl::copy_tensors(std::vector<TensorRecord>& records) {
  torch::NoGradGuard no_grad;
  for (TensorRecord& r : records) {
    torch::Tensor& buffer = copies[r.name];
    if (!buffer.defined() || buffer.sizes() != r.local.sizes() ||
        buffer.scalar_type() != r.local.scalar_type()) {
      buffer = torch::empty(r.local.sizes(), r.local.options().device(torch::kCPU));
    }
    const torch::Tensor source = r.local.detach();
    if (source.is_cpu() && source.is_contiguous()) {
      // glibc's memcpy (non-temporal stores for large sizes) runs about twice as fast as
      // Tensor::copy_ here, and this copy is what the training loop waits for.
      std::memcpy(buffer.data_ptr(), source.data_ptr(), source.nbytes());
    } else {
      buffer.copy_(source);
    }
    r.local = buffer;
  }
}

void CheckpointManager::Impl::agree_on_content(std::int64_t step, bool writer,
                                               const std::vector<TensorRecord>& tensors,
                                               std::int64_t rng_bytes) {
  // Every rank must save the same step, the tp ranks of a stage the same records, and all ranks
  // RNG states of one size: [min, max] of each over the world (of the fingerprints: over the tp
  // group, whose ranks are all writers or none, and then over the world whether any differ).
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t fp = writer ? fingerprint(tensors) : kNone;
  std::vector<std::uint64_t> fp_lo{fp};
  std::vector<std::uint64_t> fp_hi{fp};
  tp->reduce(fp_lo, comm::ReduceOp::kMin);
  tp->reduce(fp_hi, comm::ReduceOp::kMax);
  const std::uint64_t differ = fp_lo[0] != fp_hi[0] ? 1 : 0;
  std::vector<std::uint64_t> lo{static_cast<std::uint64_t>(step), differ,
                                static_cast<std::uint64_t>(rng_bytes)};
  std::vector<std::uint64_t> hi{lo[0], differ, lo[2]};
  world->reduce(lo, comm::ReduceOp::kMin);
  world->reduce(hi, comm::ReduceOp::kMax);
  if (lo[0] != hi[0]) {
    throw CheckpointError(str("ranks disagree on the step to save (", lo[0], " to ", hi[0],
                              "): every rank must call save() with the same step"));
  }
  if (hi[1] != 0) {
    throw CheckpointError(
        "tensor-parallel ranks disagree on the tensor records (names, dtypes, logical shapes or "
        "split dims differ between the dp_rank 0 ranks): every tp rank must save the same "
        "logical tensors");
  }
  if (lo[2] != hi[2]) {
    throw CheckpointError(
        str("rng_state sizes differ across ranks (", lo[2], " to ", hi[2],
            " bytes; 0 = undefined): pass every rank's generator state, or none"));
  }
}

void CheckpointManager::Impl::make_temp_dir(detail::SaveJob& job) {
  std::string reply;
  if (ctx.world_rank == 0) {
    try {
      std::filesystem::create_directories(ctx.run_dir);
      io::make_dir(checkpoints_dir(ctx.run_dir), true);
      const std::string unique = unique_token(++sequence);
      io::make_dir(job.final_dir + kTempMarker + unique, false);
      reply = "ok:" + unique;
    } catch (const std::exception& e) {
      reply = str("error:cannot create the checkpoint directory under '",
                  checkpoints_dir(ctx.run_dir), "': ", e.what());
    }
  }
  reply = world->broadcast(reply);
  if (reply.rfind("error:", 0) == 0) throw CheckpointError(reply.substr(6));
  job.unique = reply.substr(3);
  job.tmp_dir = job.final_dir + kTempMarker + job.unique;
}

CheckpointManager::CheckpointManager(std::string run_dir, const runtime::ProcessGrid& grid,
                                     ManagerOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (options.keep < 2) {
    throw ConfigError(str("checkpoint.keep = ", options.keep,
                          ": at least 2 checkpoints must be kept (the newest may be the one a "
                          "crash interrupts); set checkpoint.keep >= 2"));
  }
  Impl& m = *impl_;
  m.ctx.run_dir = std::move(run_dir);
  m.ctx.world_rank = grid.world_rank();
  m.ctx.world_size = grid.world_size();
  m.ctx.dp_size = grid.dp_size();
  m.ctx.tp_size = grid.tp_size();
  m.ctx.dp_rank = grid.dp_rank();
  m.ctx.tp_rank = grid.tp_rank();
  m.ctx.pp_size = grid.pp_size();
  m.ctx.pp_rank = grid.pp_rank();
  m.ctx.options = std::move(options);
  m.grid_world = std::make_unique<comm::ControlPlane>(grid.world_comm(), "world");
  m.grid_tp = std::make_unique<comm::ControlPlane>(grid.tp_comm(), "tp");
  m.grid_model = std::make_unique<comm::ControlPlane>(grid.model_comm(), "model");
  const runtime::Runtime* rt = runtime::Runtime::current();
  m.threaded = m.ctx.options.background && rt && rt->thread_multiple();
  if (m.ctx.options.background && !m.threaded) {
    log::warn("checkpoints are written synchronously: MPI did not grant MPI_THREAD_MULTIPLE");
  }
}

CheckpointManager::~CheckpointManager() {
  Impl& m = *impl_;
  if (m.worker.joinable()) m.worker.join();
  if (m.pending && m.ctx.world_rank == 0 && !m.result.error.empty()) log::error(m.result.error);
}

void CheckpointManager::save(SaveContent content) {
  Impl& m = *impl_;
  const auto started = Clock::now();
  m.ensure_comms();
  m.finish_pending();
  const detail::JobContext& ctx = m.ctx;
  const bool writer = ctx.dp_rank == 0;
  if (!writer) content.tensors.clear();

  std::string problem;
  if (content.step < 0) problem = str("step ", content.step, " is negative");
  if (problem.empty() && writer)
    problem = check_records(content.tensors, ctx.tp_size, content.copy);
  std::int64_t rng_bytes = 0;
  if (problem.empty() && content.rng_state.defined()) {
    if (content.rng_state.scalar_type() != torch::kUInt8) {
      problem = str("rng_state is ", content.rng_state.scalar_type(),
                    ": pass the generator state as a uint8 tensor "
                    "(at::detail::getDefaultCPUGenerator().get_state())");
    } else {
      content.rng_state = content.rng_state.to(torch::kCPU).contiguous().view({-1});
      rng_bytes = content.rng_state.numel();
    }
  }
  m.agree(problem);

  m.agree_on_content(content.step, writer, content.tensors, rng_bytes);

  // World rank 0 names the temporary directory and creates it before anyone writes into it.
  detail::SaveJob job;
  job.started = started;
  job.final_dir = checkpoints_dir(ctx.run_dir) + "/" + step_dir_name(content.step);
  m.make_temp_dir(job);

  if (rng_bytes > 0) {
    job.rng_states =
        m.world->gather_bytes(content.rng_state.data_ptr(), static_cast<std::size_t>(rng_bytes));
    job.rng_bytes = rng_bytes;
  }
  m.last_copy_seconds = 0;
  const bool deferred = writer && content.copy && content.defer_copy && m.threaded;
  if (writer && !deferred) {
    if (content.copy) {
      const auto copy_started = Clock::now();
      runtime::trace::Scope traced(0, "checkpoint copy", content.step);
      m.copy_tensors(content.tensors);
      m.last_copy_seconds = seconds_since(copy_started);
    } else {
      for (TensorRecord& r : content.tensors) r.local = r.local.contiguous();
    }
  }
  job.content = std::move(content);
  job.protect = m.protect;

  m.pending = true;
  m.worker_done = false;
  m.result = detail::JobResult{};
  if (m.threaded) {
    if (deferred) {
      std::lock_guard<std::mutex> lock(m.copy_mutex);
      m.copy_pending = true;
    }
    m.worker = std::thread([&m, deferred, job = std::move(job)]() mutable {
      // logging.trace: one lane for the writer threads (one runs at a time).
      static const int lane = runtime::trace::lane("checkpoint writer");
      if (deferred) {
        const auto copy_started = Clock::now();
        runtime::trace::Scope traced(lane, "checkpoint copy", job.content.step);
        try {
          m.copy_tensors(job.content.tensors);
        } catch (const std::exception& e) {
          job.staging_error = str("copying the tensors off the compute path failed on world rank ",
                                  m.ctx.world_rank, ": ", e.what());
        }
        m.last_copy_seconds = seconds_since(copy_started);
        m.release_copy();
      }
      runtime::trace::Scope traced(lane, "checkpoint write", job.content.step);
      m.result = detail::run_save_job(m.ctx, job, m.digest_buffer);
      m.worker_done = true;
    });
    m.last_blocking_seconds = seconds_since(started);
  } else {
    m.result = detail::run_save_job(m.ctx, job, m.digest_buffer);
    m.last_blocking_seconds = seconds_since(started);
    m.finish_pending();
  }
}

void CheckpointManager::Impl::release_copy() {
  {
    std::lock_guard<std::mutex> lock(copy_mutex);
    copy_pending = false;
  }
  copy_done.notify_all();
}

double CheckpointManager::wait_for_copy() {
  Impl& m = *impl_;
  const auto started = Clock::now();
  {
    std::unique_lock<std::mutex> lock(m.copy_mutex);
    m.copy_done.wait(lock, [&m] { return !m.copy_pending; });
  }
  m.last_copy_wait_seconds = seconds_since(started);
  return m.last_copy_wait_seconds;
}

double CheckpointManager::last_copy_wait_seconds() const {
  return impl_->last_copy_wait_seconds;
}

bool CheckpointManager::has_pending() const {
  return impl_->pending;
}

bool CheckpointManager::writing() const {
  return impl_->pending && !impl_->worker_done;
}

void CheckpointManager::wait() {
  impl_->ensure_comms();
  impl_->finish_pending();
}

double CheckpointManager::last_save_seconds() const {
  return impl_->last_save_seconds;
}

double CheckpointManager::last_blocking_seconds() const {
  return impl_->last_blocking_seconds;
}

double CheckpointManager::last_copy_seconds() const {
  return impl_->last_copy_seconds;
}

std::int64_t CheckpointManager::last_save_bytes() const {
  return impl_->last_bytes;
}

const std::string& CheckpointManager::last_saved_path() const {
  return impl_->last_path;
}

const std::string& CheckpointManager::run_dir() const {
  return impl_->ctx.run_dir;
}

std::optional<std::string> CheckpointManager::resolve(const std::string& resume,
                                                      const ManifestCheck& check) {
  Impl& m = *impl_;
  if (resume == "none" || resume.empty()) return std::nullopt;
  m.ensure_comms();
  std::string decision;  // "path:<dir>", "none", "error:<message>"
  if (m.ctx.world_rank == 0) {
    const ResumeChoice choice = choose_resume(m.ctx.run_dir, resume, check);
    for (const std::string& skipped : choice.skipped) {
      log::warn(
          str("checkpoint ", skipped, "; falling back to the newest checkpoint that verifies"));
    }
    decision = !choice.error.empty() ? "error:" + choice.error
               : choice.path         ? "path:" + *choice.path
                                     : std::string("none");
  }
  decision = m.world->broadcast(decision);
  // Decided on world rank 0 and broadcast: every rank raises it, and it is printed once.
  if (decision.rfind("error:", 0) == 0) throw AgreedCheckpointError(decision.substr(6));
  if (decision == "none") return std::nullopt;
  return decision.substr(5);
}

std::string save_local(const std::string& run_dir, SaveContent content,
                       const ManagerOptions& options) {
  const auto started = Clock::now();
  if (options.keep < 2) {
    throw ConfigError(str("checkpoint.keep = ", options.keep, ": set checkpoint.keep >= 2"));
  }
  if (content.step < 0) throw CheckpointError(str("step ", content.step, " is negative"));
  const std::string problem = check_records(content.tensors, 1, content.copy);
  if (!problem.empty()) throw CheckpointError(problem);
  detail::JobContext ctx;
  ctx.run_dir = run_dir;
  ctx.options = options;
  detail::SaveJob job;
  job.started = started;
  job.final_dir = checkpoints_dir(run_dir) + "/" + step_dir_name(content.step);
  std::filesystem::create_directories(run_dir);
  io::make_dir(checkpoints_dir(run_dir), true);
  job.unique = unique_token(0);
  job.tmp_dir = job.final_dir + kTempMarker + job.unique;
  io::make_dir(job.tmp_dir, false);
  if (content.rng_state.defined()) {
    const torch::Tensor rng = content.rng_state.to(torch::kCPU).contiguous().view({-1});
    if (rng.scalar_type() != torch::kUInt8) {
      throw CheckpointError(
          "rng_state must be a uint8 tensor (at::detail::getDefaultCPUGenerator().get_state())");
    }
    job.rng_bytes = rng.numel();
    job.rng_states.assign(rng.data_ptr<std::uint8_t>(), rng.data_ptr<std::uint8_t>() + rng.numel());
  }
  for (TensorRecord& r : content.tensors) {
    r.local = r.local.detach().to(torch::kCPU).contiguous();
  }
  job.content = std::move(content);
  std::string digest_buffer;
  const detail::JobResult result = detail::run_save_job(ctx, job, digest_buffer);
  if (!result.error.empty()) throw CheckpointError(result.error);
  return result.path;
}

}  // namespace hpctrain::checkpoint
