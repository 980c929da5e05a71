#pragma once
// Private: the state behind CheckpointManager, shared by its save (checkpoint_manager.cpp) and
// load (checkpoint_load.cpp) halves.

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "save_job.hpp"

namespace hpctrain::checkpoint {

/// An empty logical shape means "replicated, as held": a convenience for unsharded records.
/// Local.
inline void normalize_shard(TensorRecord& r) {
  if (r.shard.logical_shape.empty() && r.local.defined() && r.local.dim() > 0) {
    r.shard.logical_shape = r.local.sizes().vec();
    r.shard.split_dim = -1;
  }
}

struct CheckpointManager::Impl {
  detail::JobContext ctx;
  std::unique_ptr<comm::ControlPlane> grid_world;  // the grid's groups, not duplicated
  std::unique_ptr<comm::ControlPlane> grid_tp;
  std::unique_ptr<comm::ControlPlane> grid_model;
  std::unique_ptr<comm::ControlPlane> world;  // private duplicates, made by the first collective
  std::unique_ptr<comm::ControlPlane> tp;
  std::unique_ptr<comm::ControlPlane> model;  // the writers' messages
  bool threaded = false;

  std::thread worker;
  bool pending = false;
  std::atomic<bool> worker_done{false};  // set by the worker as its last act
  detail::JobResult result;              // written by the worker, read after join()
  std::string digest_buffer;
  std::map<std::string, torch::Tensor> copies;  // reused by content.copy saves
  std::vector<std::string> protect;
  int sequence = 0;

  double last_save_seconds = 0;
  double last_blocking_seconds = 0;
  double last_copy_seconds = 0;
  double last_copy_wait_seconds = 0;

  // Deferred copy (SaveContent::defer_copy): the worker copies the live tensors first and then
  // clears copy_pending; wait_for_copy() blocks on it.
  std::mutex copy_mutex;
  std::condition_variable copy_done;
  bool copy_pending = false;
  /// Marks the deferred copy done (or abandoned) and wakes wait_for_copy(). Any thread.
  void release_copy();
  std::int64_t last_bytes = 0;
  std::string last_path;

  /// Duplicates the world, tp and model control channels on first use. Collective over the
  /// world.
  void ensure_comms();
  /// Every rank passes its problem (empty: none); if any rank has one, every rank throws
  /// CheckpointError with the lowest such rank's message (naming that rank when it is not rank
  /// 0), so all ranks fail alike. Collective over the world.
  void agree(const std::string& problem);
  /// Joins the running save and makes its outcome known on every rank (world rank 0 knows it:
  /// the other writers reported to it); throws its error. Collective over the world.
  void finish_pending();
  /// Copies `records` into the reused buffers (content.copy) and points them there. Local.
  void copy_tensors(std::vector<TensorRecord>& records);
  /// save()'s agreement: every rank saves `step`, the tp ranks of a stage the same records
  /// (`tensors`, a writer's), and all ranks RNG states of one size (`rng_bytes`); otherwise
  /// every rank throws CheckpointError naming the disagreement. Collective over the world.
  void agree_on_content(std::int64_t step, bool writer, const std::vector<TensorRecord>& tensors,
                        std::int64_t rng_bytes);
  /// World rank 0 creates the temporary directory of `job.final_dir`; every rank learns its name
  /// into `job` (or throws CheckpointError, as every rank does). Collective over the world.
  void make_temp_dir(detail::SaveJob& job);
};

}  // namespace hpctrain::checkpoint
