#include "save_job.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <thread>

#include "file_io.hpp"
#include "h5_store.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/checkpoint/manifest.hpp"
#include "hpctrain/checkpoint/retention.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "slab_io.hpp"

namespace hpctrain::checkpoint::detail {
namespace {

using Clock = std::chrono::steady_clock;
using Layout =
    std::map<std::string, std::map<std::string, std::uint64_t>>;  // file -> path -> offset

constexpr int kTagLayout = 71;
constexpr int kTagDone = 72;
constexpr int kTagSpecs = 73;

// Seconds spent in each phase of a save, for the debug log and benchmarks.
class PhaseTimer {
 public:
  explicit PhaseTimer(Clock::time_point start) : last_(start) {}
  void mark(const char* phase) {
    const auto now = Clock::now();
    text_ += str(text_.empty() ? "" : ", ", phase, " ",
                 format_seconds(std::chrono::duration<double>(now - last_).count()));
    last_ = now;
  }
  const std::string& text() const { return text_; }

 private:
  Clock::time_point last_;
  std::string text_;
};

std::string error_text(const std::exception& e) {
  return e.what();
}

// Names a file that a writer other than world rank 0 failed on, for rank 0's report (writer r
// of dp group 0 is world rank r).
std::string writer_error(const JobContext& ctx, int writer, const std::string& error) {
  if (ctx.pp_size == 1) return str("tp rank ", writer, " (world rank ", writer, "): ", error);
  return str("pp rank ", writer / ctx.tp_size, " tp rank ", writer % ctx.tp_size, " (world rank ",
             writer, "): ", error);
}

// What one tensor of the checkpoint is, as the manifest and the file creation need it.
struct Spec {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  int split_dim = -1;
};

std::vector<Spec> specs_of(const SaveContent& content) {
  std::vector<Spec> specs;
  for (const TensorRecord& r : content.tensors) {
    specs.push_back({r.name, h5::dtype_name(r.local.scalar_type(), r.name), r.shard.logical_shape,
                     r.shard.split_dim});
  }
  return specs;
}

nlohmann::json to_json(const std::vector<Spec>& specs) {
  nlohmann::json j = nlohmann::json::array();
  for (const Spec& s : specs) j.push_back({s.name, s.dtype, s.shape, s.split_dim});
  return j;
}

std::vector<Spec> specs_from_json(const nlohmann::json& j) {
  std::vector<Spec> specs;
  for (const auto& e : j) {
    specs.push_back({e.at(0).get<std::string>(), e.at(1).get<std::string>(),
                     e.at(2).get<std::vector<std::int64_t>>(), e.at(3).get<int>()});
  }
  return specs;
}

// Removes what crashed or failed saves left: step_<N>.tmp-* directories (and the -old/-del
// ones), latest.tmp-* files. Never the directory of the save in progress.
void remove_stale(const std::string& root, const std::string& current_unique) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find(kTempMarker) == std::string::npos) continue;
    if (name.find(current_unique) != std::string::npos) continue;
    const std::string error = io::remove_tree(entry.path().string());
    if (error.empty()) {
      log::debug(str("checkpoint: removed ", entry.path().string(), " left by an unfinished save"));
    } else {
      log::warn(str("checkpoint: ", error, " (left by an unfinished save)"));
    }
  }
}

// The datasets world rank 0 creates, file by file, from the records of every stage (every tp
// rank of a stage holds the same names and logical shapes: save() checked).
std::map<std::string, std::vector<h5::DatasetSpec>> dataset_specs(const std::vector<Spec>& all) {
  std::map<std::string, std::vector<h5::DatasetSpec>> specs;
  for (const Spec& r : all) {
    const TensorLocation loc = tensor_location(r.name);
    specs[loc.file].push_back({loc.dataset, r.dtype, r.shape});
  }
  return specs;
}

// Writes this rank's slab of every record into the files at the offsets world rank 0 created,
// and returns the files, still open (the caller fsyncs them). Replicated records are written by
// tp rank 0 alone.
std::map<std::string, io::Fd> write_slabs(const JobContext& ctx, const SaveJob& job,
                                          const Layout& layout) {
  fail_point("write", ctx.world_rank);
  if (!job.staging_error.empty()) throw CheckpointError(job.staging_error);
  std::map<std::string, io::Fd> files;
  for (const TensorRecord& r : job.content.tensors) {
    if (r.shard.split_dim < 0 && ctx.tp_rank != 0) continue;
    if (r.local.numel() == 0) continue;
    const TensorLocation loc = tensor_location(r.name);
    const int d = r.shard.split_dim;
    const slab::Geometry g = slab::geometry(r.shard.logical_shape, d, d >= 0 ? r.local.size(d) : 0,
                                            ctx.tp_rank, r.local.element_size());
    if (g.empty()) continue;
    const auto file_it = layout.find(loc.file);
    const auto it = file_it == layout.end() ? std::map<std::string, std::uint64_t>::const_iterator()
                                            : file_it->second.find(loc.dataset);
    if (file_it == layout.end() || it == file_it->second.end()) {
      throw CheckpointError(str("tensor '", r.name, "': world rank 0 did not create dataset ",
                                loc.dataset, " in ", loc.file,
                                " (tensor-parallel ranks saved different records)"));
    }
    const std::string path = job.tmp_dir + "/" + loc.file;
    auto fd = files.find(loc.file);
    if (fd == files.end()) fd = files.emplace(loc.file, io::open_file(path, O_WRONLY)).first;
    slab::write_slab(fd->second.get(), path, it->second, r.local, g);
  }
  return files;
}

void sync_files(const std::map<std::string, io::Fd>& files, const std::string& dir) {
  for (const auto& [file, fd] : files) io::sync_fd(fd.get(), dir + "/" + file);
}

nlohmann::json manifest_of(const JobContext& ctx, const SaveJob& job, const std::vector<Spec>& all,
                           const std::map<std::string, FileDigest>& digests) {
  const SaveContent& c = job.content;
  nlohmann::json m;
  m["format"] = kFormatName;
  m["format_version"] = kFormatVersion;
  m["step"] = c.step;
  m["epoch"] = c.epoch;
  m["consumed_samples"] = c.consumed_samples;
  m["metric"] = c.metric && std::isfinite(*c.metric) ? nlohmann::json(*c.metric) : nlohmann::json();
  m["metric_name"] = ctx.options.metric_name;
  m["higher_is_better"] = ctx.options.higher_is_better;
  m["created_at"] = utc_timestamp();
  m["world_size"] = ctx.world_size;
  m["grid"] = {{"dp", ctx.dp_size}, {"tp", ctx.tp_size}};
  if (ctx.pp_size > 1) m["grid"]["pp"] = ctx.pp_size;
  m["config_xxh3"] = xxh3_hex(c.config_text);
  m["hpctrain_version"] = HPCTRAIN_VERSION;
  m["torch_version"] = compat::torch_version();
  m["hdf5_version"] = h5::library_version();
  m["trainer_state"] = c.trainer_state.is_null() ? nlohmann::json::object() : c.trainer_state;
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, d] : digests) files[name] = {{"bytes", d.bytes}, {"xxh3", d.xxh3}};
  m["files"] = files;
  nlohmann::json tensors = nlohmann::json::object();
  for (const Spec& r : all) {
    const TensorLocation loc = tensor_location(r.name);
    tensors[r.name] = {{"file", loc.file}, {"dataset", loc.dataset},   {"dtype", r.dtype},
                       {"shape", r.shape}, {"split_dim", r.split_dim}, {"saved_tp", ctx.tp_size}};
  }
  m["tensors"] = tensors;
  if (job.rng_bytes > 0) {
    m["rng"] = {{"file", "rng.h5"},
                {"dataset", "/cpu"},
                {"ranks", ctx.world_size},
                {"bytes", job.rng_bytes},
                {"generator", "torch CPU"}};
  } else {
    m["rng"] = nullptr;
  }
  return m;
}

// Renames the finished temporary directory to its final name. A checkpoint already there (a
// re-save of the same step after a resume) is swapped out atomically where the filesystem can
// (RENAME_EXCHANGE); elsewhere it is renamed away first, which leaves a short window without
// step_<N> (a loader then falls back to the previous checkpoint).
void install(const SaveJob& job) {
  struct stat st {};
  if (::stat(job.final_dir.c_str(), &st) != 0) {
    io::rename_path(job.tmp_dir, job.final_dir);
    return;
  }
  log::info(str("checkpoint: replacing existing ", job.final_dir));
  if (io::exchange_paths(job.tmp_dir, job.final_dir)) {
    io::sync_path(io::parent_dir(job.final_dir));
    io::remove_tree(job.tmp_dir);  // now holds the old one; a leftover is removed as stale
    return;
  }
  const std::string old = job.final_dir + kTempMarker + job.unique + "-old";
  io::rename_path(job.final_dir, old);
  io::rename_path(job.tmp_dir, job.final_dir);
  io::sync_path(io::parent_dir(job.final_dir));
  io::remove_tree(old);
}

std::string canonical(const std::string& path) {
  std::error_code ec;
  auto p = std::filesystem::weakly_canonical(path, ec);
  return ec ? path : p.string();
}

void apply_retention(const JobContext& ctx, const SaveJob& job) {
  std::vector<RetentionCandidate> candidates;
  for (const std::string& path : list_checkpoints(ctx.run_dir)) {
    RetentionCandidate c;
    c.path = canonical(path);
    c.step = parse_step_dir_name(std::filesystem::path(path).filename().string()).value_or(0);
    try {
      const nlohmann::json m = read_manifest(path);
      if (m.contains("metric") && m.at("metric").is_number())
        c.metric = m.at("metric").get<double>();
    } catch (const CheckpointError&) {
      // An unreadable manifest has no metric; retention still counts it by step.
    }
    candidates.push_back(std::move(c));
  }
  std::vector<std::string> protect{canonical(job.final_dir)};
  for (const std::string& p : job.protect) protect.push_back(canonical(p));
  RetentionPolicy policy{ctx.options.keep, ctx.options.keep_best, ctx.options.higher_is_better};
  for (const RetentionCandidate& doomed : select_for_deletion(candidates, policy, protect)) {
    // Renamed away first (atomic), so a crash mid-delete never leaves a half step_<N>.
    const std::string trash = doomed.path + kTempMarker + job.unique + "-del";
    try {
      io::rename_path(doomed.path, trash);
      crash_point("during-retention");
      const std::string error = io::remove_tree(trash);
      if (!error.empty()) log::warn(str("checkpoint retention: ", error));
      log::debug(str("checkpoint retention: removed ", doomed.path));
    } catch (const CheckpointError& e) {
      log::warn(str("checkpoint retention: ", e.what()));
    }
  }
}

// World rank 0 after every writer reported success: small files, checksums, manifest, commit.
JobResult commit(const JobContext& ctx, SaveJob& job, const std::vector<Spec>& all,
                 std::map<std::string, FileDigest> digests, std::string& digest_buffer,
                 PhaseTimer& timer) {
  JobResult result;
  fail_point("commit", ctx.world_rank);
  std::vector<std::string> files;
  if (job.rng_bytes > 0) {
    const std::string path = job.tmp_dir + "/rng.h5";
    h5::write_rng_file(path, job.rng_states, ctx.world_size, job.rng_bytes, job.content.step);
    io::sync_path(path);
    files.push_back("rng.h5");
  }
  if (!job.content.config_text.empty()) {
    io::write_file_synced(job.tmp_dir + "/config.yaml", job.content.config_text);
    files.push_back("config.yaml");
  }
  for (const std::string& f : files) digests[f] = digest_file(job.tmp_dir + "/" + f, digest_buffer);
  for (const auto& [name, digest] : digests) {
    result.bytes += static_cast<std::int64_t>(digest.bytes);
    io::drop_cache(job.tmp_dir + "/" + name);  // fsynced and checksummed: clean pages
  }
  timer.mark("small files");
  crash_point("after-data");
  const std::string manifest = seal_manifest(manifest_of(ctx, job, all, digests));
  io::write_file_synced(job.tmp_dir + "/" + kManifestFile, manifest);
  io::sync_path(job.tmp_dir);
  result.bytes += static_cast<std::int64_t>(manifest.size());
  timer.mark("manifest");
  crash_point("after-manifest");
  install(job);
  const std::string root = checkpoints_dir(ctx.run_dir);
  io::sync_path(root);
  timer.mark("rename");
  crash_point("after-rename");
  io::replace_file(root + "/" + kLatestFile,
                   std::filesystem::path(job.final_dir).filename().string() + "\n",
                   kTempMarker + job.unique);
  timer.mark("latest");
  // Committed: that is what "save time" means; retention's deletions follow (wait() waits for
  // them too).
  result.seconds = std::chrono::duration<double>(Clock::now() - job.started).count();
  crash_point("after-latest");
  apply_retention(ctx, job);
  timer.mark("retention");
  result.path = job.final_dir;
  return result;
}

JobResult run_rank0(const JobContext& ctx, SaveJob& job, std::string& digest_buffer) {
  JobResult result;
  // From save(): agreeing on the content, the temporary directory, RNG states, the copy (unless
  // deferred), the hand-over to the writer thread.
  PhaseTimer timer(job.started);
  timer.mark("save() until writing");
  std::string error;
  Layout layout;
  std::vector<std::string> data_files;
  // Every stage's records: this one's, and what the other stages' tp rank 0 sent.
  std::vector<Spec> all = specs_of(job.content);
  for (int stage = 1; stage < ctx.pp_size; ++stage) {
    const auto j = nlohmann::json::parse(ctx.writers->recv_text(stage * ctx.tp_size, kTagSpecs),
                                         nullptr, false);
    if (j.is_discarded()) {
      if (error.empty())
        error = str("could not parse the records of pp rank ", stage, " (internal error)");
      continue;
    }
    for (Spec& spec : specs_from_json(j)) {
      for (const Spec& seen : all) {
        if (seen.name == spec.name && error.empty()) {
          error = str("tensor record '", spec.name, "' is saved by two pipeline stages (pp rank ",
                      stage,
                      " and an earlier one): a parameter two stages hold must be saved by "
                      "one (model::StageCopy)");
        }
      }
      all.push_back(std::move(spec));
    }
  }
  try {
    if (!error.empty()) throw CheckpointError(error);
    remove_stale(checkpoints_dir(ctx.run_dir), job.unique);
    timer.mark("stale removal");
    for (const auto& [file, specs] : dataset_specs(all)) {
      layout[file] = h5::create_tensor_file(job.tmp_dir + "/" + file, specs, job.content.step);
      data_files.push_back(file);
    }
    timer.mark("create");
    crash_point("after-create");
  } catch (const std::exception& e) {
    error = error_text(e);
  }
  if (ctx.writer_count() > 1) {
    const std::string message = nlohmann::json{{"error", error}, {"layout", layout}}.dump();
    for (int r = 1; r < ctx.writer_count(); ++r) ctx.writers->send_text(r, kTagLayout, message);
  }
  std::map<std::string, io::Fd> own;
  if (error.empty()) {
    try {
      own = write_slabs(ctx, job, layout);
    } catch (const std::exception& e) {
      error = error_text(e);
    }
  }
  timer.mark("write");
  // This rank's fsync runs on a second thread while the other writers finish and, once every
  // slab is written, while this thread checksums the files (from the page cache).
  std::string sync_error;
  std::thread syncer([&] {
    try {
      sync_files(own, job.tmp_dir);
    } catch (const std::exception& e) {
      sync_error = error_text(e);
    }
  });
  for (int r = 1; r < ctx.writer_count(); ++r) {
    const std::string done = ctx.writers->recv_text(r, kTagDone);
    if (!done.empty() && error.empty()) error = writer_error(ctx, r, done);
  }
  if (ctx.writer_count() > 1) timer.mark("other writers");
  std::map<std::string, FileDigest> digests;
  try {
    if (error.empty()) {
      for (const std::string& f : data_files) {
        digests[f] = digest_file(job.tmp_dir + "/" + f, digest_buffer);
      }
    }
  } catch (const std::exception& e) {
    error = error_text(e);
  }
  syncer.join();
  if (error.empty()) error = sync_error;
  timer.mark("fsync + checksums");
  own.clear();
  if (error.empty()) {
    try {
      result = commit(ctx, job, all, std::move(digests), digest_buffer, timer);
      result.phases = timer.text();
    } catch (const std::exception& e) {
      error = error_text(e);
    }
  }
  if (!error.empty()) {
    // Nothing half-written keeps a name a loader would take: the temporary directory goes.
    io::remove_tree(job.tmp_dir);
    result = JobResult{};
    result.error = str("saving checkpoint step ", job.content.step, " failed: ", error,
                       "; the previous checkpoint is intact");
  }
  return result;
}

JobResult run_writer(const JobContext& ctx, SaveJob& job) {
  JobResult result;
  // A stage's tp rank 0 tells world rank 0 what the stage saves (its tp ranks save the same).
  if (ctx.pp_rank > 0 && ctx.tp_rank == 0) {
    ctx.writers->send_text(0, kTagSpecs, to_json(specs_of(job.content)).dump());
  }
  const nlohmann::json message =
      nlohmann::json::parse(ctx.writers->recv_text(0, kTagLayout), nullptr, false);
  std::string error;
  if (message.is_discarded()) {
    error = "could not parse the layout message from world rank 0 (internal error)";
  } else if (message.value("error", std::string()).empty()) {
    try {
      sync_files(write_slabs(ctx, job, message.at("layout").get<Layout>()), job.tmp_dir);
    } catch (const std::exception& e) {
      error = error_text(e);
    }
  }
  ctx.writers->send_text(0, kTagDone, error);
  result.error = error;
  return result;
}

}  // namespace

JobResult run_save_job(const JobContext& ctx, SaveJob& job, std::string& digest_buffer) {
  JobResult result;
  if (ctx.dp_rank == 0) {
    result = ctx.world_rank == 0 ? run_rank0(ctx, job, digest_buffer) : run_writer(ctx, job);
  }
  if (result.seconds == 0) {
    result.seconds = std::chrono::duration<double>(Clock::now() - job.started).count();
  }
  if (ctx.world_rank == 0 && result.error.empty()) {
    log::info(str("checkpoint ", std::filesystem::path(result.path).filename().string(),
                  " saved: ", format_bytes(static_cast<double>(result.bytes)), " in ",
                  format_seconds(result.seconds), " (",
                  format_bytes(static_cast<double>(result.bytes) / std::max(result.seconds, 1e-9)),
                  "/s)"));
    log::debug(str("checkpoint phases: ", result.phases));
  }
  return result;
}

void crash_point(const char* phase) {
  static const std::pair<std::string, int> target = [] {
    const char* env = std::getenv("HPCTRAIN_TEST_CHECKPOINT_CRASH");
    std::string spec = env ? env : "";
    int nth = 1;
    if (const auto colon = spec.find(':'); colon != std::string::npos) {
      nth = std::max(1, std::atoi(spec.c_str() + colon + 1));
      spec.resize(colon);
    }
    return std::make_pair(spec, nth);
  }();
  static std::mutex mutex;
  static int seen = 0;
  if (target.first.empty() || target.first != phase) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (++seen == target.second) ::kill(::getpid(), SIGKILL);
}

void fail_point(const char* phase, int world_rank) {
  const char* env = std::getenv("HPCTRAIN_TEST_CHECKPOINT_FAIL");
  if (env && str(phase, "@", world_rank) == env) {
    throw CheckpointError(str("injected failure at ", phase, " on world rank ", world_rank,
                              " (HPCTRAIN_TEST_CHECKPOINT_FAIL)"));
  }
}

}  // namespace hpctrain::checkpoint::detail
