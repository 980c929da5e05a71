#pragma once
// Saving and loading checkpoints across the process grid (docs/ARCHITECTURE.md, invariants 3 and
// 4). A checkpoint is a directory <run_dir>/checkpoints/step_<N>/ holding HDF5 files of logical
// tensors (PyTorch state_dict names; tensor-parallel ranks write their hyperslabs), every rank's
// RNG state, the run's config, and a manifest.json written last with the trainer state and each
// file's size and xxh3 checksum. It is written to step_<N>.tmp-<unique>/, fsynced, renamed into
// place, and only then named by the `latest` pointer (replaced atomically).
// Format and protocol: docs/CHECKPOINTS.md.
//
// Who does what: only the ranks with dp_rank 0 write tensors (the other dp ranks hold the same
// values). World rank 0 (tp rank 0 of that group) creates each HDF5 file with every logical
// dataset (contiguous, allocated up front), sends the datasets' file offsets to the other tp
// ranks, and every tp rank writes its slab at those offsets with plain pwrite(), concurrently:
// byte ranges are disjoint, and no rank has the file open in HDF5 while data is written, so this
// works with serial and parallel HDF5 alike and holds the process-wide HDF5 lock only for the
// milliseconds of metadata work. World rank 0 then checksums the files and commits. All of that
// runs on one background thread per rank when MPI granted MPI_THREAD_MULTIPLE, on dedicated
// duplicates of the world and tp communicators.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/model/model.hpp"

namespace hpctrain::runtime {
class ProcessGrid;
}

namespace hpctrain::checkpoint {

/// One tensor of a checkpoint as this rank holds it.
struct TensorRecord {
  std::string name;        ///< "model/fc1.weight", "optimizer/exp_avg/fc1.weight"
  torch::Tensor local;     ///< this rank's tensor (the shard when tensor parallel)
  model::ShardInfo shard;  ///< logical shape and split dim (-1: replicated)
  /// The model parameter or buffer the tensor belongs to ("fc1.weight" for both records above);
  /// empty where no parameter is meant (int8 scales). The trainer drops a pipeline stage's
  /// copies of a tied parameter by it.
  std::string parameter = {};
};

/// What the trainer hands over at a save. Only ranks with dp_rank 0 write `tensors`; the others
/// may pass an empty vector (their records are ignored).
struct SaveContent {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t consumed_samples = 0;
  nlohmann::json trainer_state;  ///< resume state (sampler position, schedule, best metric...)
  std::vector<TensorRecord> tensors;
  torch::Tensor rng_state;       ///< this rank's CPU generator state (uint8), may be undefined
  std::string config_text;       ///< the run's resolved config (stored as config.yaml)
  std::optional<double> metric;  ///< eval metric at this step, for keep-best retention
  /// false: `tensors` are already off the compute path (CPU copies training will not modify).
  /// true: `tensors` may be live parameters and optimizer state on any device; save() copies
  /// them, after the previous save has finished, into CPU buffers the manager keeps and reuses
  /// from save to save (no fresh allocation, so no page faults), and that copy is all the
  /// training loop waits for.
  bool copy = false;
  /// With `copy` and background writing: save() does not copy; the background thread copies the
  /// live tensors first, and the caller must call wait_for_copy() before it next modifies any of
  /// them (the optimizer step). Training's next forward and backward (which only read the
  /// parameters) then overlap the copy. Without background writing the copy stays in save().
  bool defer_copy = false;
};

/// How a CheckpointManager saves and what it keeps.
struct ManagerOptions {
  int keep = 2;                   ///< newest complete checkpoints kept (>= 2)
  bool keep_best = true;          ///< also keep the best by metric
  bool higher_is_better = false;  ///< metric direction
  bool background = true;         ///< write on a background thread (needs MPI_THREAD_MULTIPLE)
  std::string metric_name;        ///< stored in the manifest next to the metric ("accuracy")
};

/// What load() found.
struct Loaded {
  std::string path;  ///< the checkpoint directory loaded
  nlohmann::json manifest;
  nlohmann::json trainer_state;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::int64_t consumed_samples = 0;
  torch::Tensor rng_state;  ///< this rank's saved RNG state when the world size matches
  bool same_world = false;  ///< saved with the same world size (rng_state is this rank's own)
  bool same_grid = false;   ///< saved with the same dp x tp grid
};

class CheckpointManager {
 public:
  /// Local; nothing is written until save(). Throws ConfigError when options.keep < 2.
  /// Checkpoint traffic (decisions, agreements, the writers' messages) runs on private control
  /// channels over the grid's world and tp groups (duplicated by the first collective call),
  /// never on the training communicators (which may be NCCL).
  CheckpointManager(std::string run_dir, const runtime::ProcessGrid& grid, ManagerOptions options);
  /// Waits for a background write (errors are logged, not thrown) and frees the duplicated
  /// communicators. Local.
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  /// Saves `content` with the commit protocol; returns once the state is off the compute path
  /// (the writing may continue in the background; the next save(), wait() or the destructor
  /// waits for it). Waits for the previous save first and rethrows its error. Throws
  /// CheckpointError on every rank when any rank's content is unusable (names, shapes, dtypes,
  /// ranks disagreeing on step or tensors) or the run directory cannot be written. Removes
  /// temporary directories left by crashed saves, and applies retention after the commit.
  /// Collective over the world.
  void save(SaveContent content);
  /// Waits for a background save to be committed; rethrows its error (CheckpointError) on every
  /// rank. A failed save leaves nothing a loader would take. Collective over the world.
  void wait();
  /// A save was handed over and its outcome is not known yet (wait() has not run). Local.
  bool has_pending() const;
  /// This rank's part of the pending save is still being written (false once its background
  /// writer finished, successfully or not: wait() then returns at once). Local; the trainer
  /// agrees on it every step so a failed save is reported at the step its writing ended.
  bool writing() const;
  /// Seconds the last complete save took, from save() to the commit (`latest` replaced; the
  /// deletions of retention follow). 0 before the first. Known on every rank after wait() or the
  /// next save(). Local.
  double last_save_seconds() const;
  /// Seconds the last save() blocked its caller (including the copy when content.copy). Local.
  double last_blocking_seconds() const;
  /// Seconds spent copying the tensors of the last save (content.copy; else 0): inside save(),
  /// or on the background thread with defer_copy. Local; for a deferred copy, known after
  /// wait_for_copy().
  double last_copy_seconds() const;
  /// Blocks until a deferred copy (SaveContent::defer_copy) of the last save has taken the
  /// tensors off the compute path; returns at once when there is none. Returns the seconds it
  /// waited (also last_copy_wait_seconds()). Call before modifying the saved tensors. Local.
  double wait_for_copy();
  /// Seconds the last wait_for_copy() blocked. Local.
  double last_copy_wait_seconds() const;
  /// Bytes of the last committed checkpoint (all its files), after wait(). Local.
  std::int64_t last_save_bytes() const;
  /// Directory of the last committed checkpoint (empty before the first), after wait(). Local.
  const std::string& last_saved_path() const;
  /// The run directory; checkpoints live in <run_dir>/checkpoints. Local.
  const std::string& run_dir() const;

  /// Which checkpoint to resume from: resume = "none" -> nullopt; "auto" -> the `latest` one if
  /// it verifies, else the newest that verifies (logging why others were skipped), nullopt if
  /// none; a path (or a step_<N> name inside <run_dir>/checkpoints) -> that one, or
  /// CheckpointError if it does not verify. `check` vets a verified manifest as the reader needs
  /// it (choose_resume): a checkpoint it refuses is skipped like one that does not verify. Rank 0
  /// verifies and broadcasts the decision. Collective over the world.
  std::optional<std::string> resolve(const std::string& resume, const ManifestCheck& check = {});

  /// Loads the checkpoint at `dir` into `targets` (each record's `local` is written in place
  /// with this rank's slab of the logical tensor, resharding for any tp size; padding rows past
  /// the logical extent are zeroed; values are converted to the target's dtype and device).
  /// Throws CheckpointError on every rank naming every missing or mismatching tensor (name,
  /// saved logical shape, expected). Records absent from `targets` are ignored (e.g. optimizer
  /// state for evaluation). Does not re-verify checksums (resolve() did). Marks `dir` as
  /// protected from retention. Collective over the world.
  Loaded load(const std::string& dir, std::vector<TensorRecord>& targets);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Saves `content` as the checkpoint of a single process (world size 1, dp = tp = 1) without
/// MPI, synchronously, with the same format, commit protocol and retention as
/// CheckpointManager::save (options.background is ignored). For tools and tests. Returns the
/// checkpoint directory; throws CheckpointError. Local.
std::string save_local(const std::string& run_dir, SaveContent content,
                       const ManagerOptions& options = {});

/// Loads the checkpoint at `dir` into `targets` as a single process (tp = 1: each target holds
/// the whole logical tensor) without MPI, with the same checks and messages as
/// CheckpointManager::load. rng_state is rank 0's when the checkpoint was saved by one rank.
/// For tools and tests. Local.
Loaded load_local(const std::string& dir, std::vector<TensorRecord>& targets);

}  // namespace hpctrain::checkpoint
