#pragma once
// Private: the part of a save that runs after save() returns (on the background thread, or
// inline when writing synchronously): creating the files, writing every writer's slabs,
// checksumming, writing the manifest, committing with renames and fsyncs, the `latest` pointer,
// retention and the removal of stale temporary directories. docs/CHECKPOINTS.md describes the
// protocol step by step.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/checkpoint/checkpoint_manager.hpp"

namespace hpctrain::comm {
class ControlPlane;
}

namespace hpctrain::checkpoint::detail {

/// This rank's place in the grid and what the manager was configured with.
struct JobContext {
  std::string run_dir;
  int world_rank = 0;
  int world_size = 1;
  int dp_size = 1;
  int tp_size = 1;
  int dp_rank = 0;
  int tp_rank = 0;
  int pp_size = 1;
  int pp_rank = 0;
  /// The manager's private control channel over this rank's model replica (pp x tp ranks, rank
  /// pp_rank x tp + tp_rank; the tp group when pp = 1): the writers of dp group 0 meet here.
  comm::ControlPlane* writers = nullptr;
  ManagerOptions options;
  /// Ranks in a replica (the writers). Local.
  int writer_count() const { return pp_size * tp_size; }
};

/// One save, as handed over by save().
struct SaveJob {
  SaveContent content;  ///< tensors contiguous, on the CPU (writers only)
  std::string unique;   ///< agreed across ranks; names the temporary directory
  std::string tmp_dir;
  std::string final_dir;
  std::vector<std::uint8_t> rng_states;  ///< world rank 0: world_size rows of rng_bytes
  std::int64_t rng_bytes = 0;
  std::vector<std::string> protect;  ///< checkpoints retention must keep (loaded ones)
  std::chrono::steady_clock::time_point started;
  /// Why copying the tensors off the compute path failed (deferred copy); writing reports it.
  std::string staging_error;
};

/// What a save job ended with on this rank (world rank 0 knows the whole outcome).
struct JobResult {
  std::string error;  ///< empty on success
  double seconds = 0;
  std::int64_t bytes = 0;
  std::string path;
  std::string phases;  ///< world rank 0: seconds per phase ("create 0.002 s, write ..."), for -v
};

/// Runs this rank's part of `job`: nothing on ranks with dp_rank > 0; writing its slabs on the
/// other ranks of dp group 0 (after world rank 0 created the files; with pipeline stages, each
/// stage's tp rank 0 first tells world rank 0 what its stage saves); on world rank 0 also the
/// commit. Never throws: errors end up in the result (and, for writers other than world rank 0,
/// in the message they send to it). Local except for point-to-point messages on ctx.writers
/// between the writers.
JobResult run_save_job(const JobContext& ctx, SaveJob& job, std::string& digest_buffer);

/// Test hook: when HPCTRAIN_TEST_CHECKPOINT_CRASH is "<phase>" or "<phase>:<n>", the process
/// kills itself with SIGKILL the n-th time (default 1st) world rank 0 reaches `phase`
/// (after-create, after-data, after-manifest, after-rename, after-latest, during-retention).
/// Local.
void crash_point(const char* phase);

/// Test hook: when HPCTRAIN_TEST_CHECKPOINT_FAIL is "<phase>@<world_rank>" (read at each call),
/// throws CheckpointError("injected failure ...") on that rank at `phase` ("write": before a
/// writer writes its slabs; "commit": before world rank 0 commits). Local.
void fail_point(const char* phase, int world_rank);

}  // namespace hpctrain::checkpoint::detail
