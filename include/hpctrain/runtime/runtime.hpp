#pragma once
// MPI bootstrap: one Runtime per process, created first thing in main() and destroyed last.
// Works under mpirun, srun --mpi=pmix, and as a single process started without a launcher.

#include <mpi.h>

#include <string>

namespace hpctrain::runtime {

/// What the bootstrap found out about this process and its job.
class Runtime {
 public:
  /// Whether a command needs MPI.
  enum class Start {
    kMpi,    ///< always start MPI (commands that compute together: train, eval, env, bench)
    kLocal,  ///< one-process commands (inspect, plan, report, export, ...): start MPI only when
             ///< a launcher started this process. A direct call then skips MPI's singleton
             ///< start-up (it spawns a daemon: about a second per call).
  };
  /// Initialises MPI asking for MPI_THREAD_MULTIPLE (falls back to what the library grants and
  /// records it), sets MPI_ERRORS_RETURN on the world communicator, and derives local rank,
  /// local size and node count from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
  /// Collective over MPI_COMM_WORLD. Throws CommError if MPI cannot start.
  /// With Start::kLocal and no launcher, MPI is not started: one rank, one node, no MPI calls.
  Runtime(int* argc, char*** argv, Start start = Start::kMpi);
  /// Finalizes MPI if this object initialised it. Collective over MPI_COMM_WORLD.
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  /// Rank among the processes of this node (shared-memory domain).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int node_count() const { return node_count_; }
  const std::string& host() const { return host_; }
  /// MPI_THREAD_SINGLE..MPI_THREAD_MULTIPLE as granted by the library.
  int thread_level() const { return thread_level_; }
  bool thread_multiple() const { return thread_level_ == MPI_THREAD_MULTIPLE; }
  /// "mpirun", "srun" or "none" (a single process started directly).
  const std::string& launcher() const { return launcher_; }
  /// Whether MPI runs in this process (see Start).
  bool mpi_started() const { return mpi_started_; }
  /// MPI_COMM_WORLD. Throws Error (an internal error) when MPI was not started.
  MPI_Comm world() const;
  /// Ranks sharing this node, ordered by world rank.
  MPI_Comm node_comm() const { return node_comm_; }

  /// The MPI library's own version string (MPI_Get_library_version), first line. Local.
  static std::string mpi_library_version();
  /// The MPI standard the library implements ("3.1"; MPI_Get_version). Local.
  static std::string mpi_standard_version();
  /// "MPI_THREAD_MULTIPLE" etc. Local.
  static std::string thread_level_name(int level);
  /// The process that owns the runtime, or nullptr before/after it exists. Local.
  static Runtime* current();

 private:
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int node_count_ = 1;
  int thread_level_ = MPI_THREAD_SINGLE;
  bool initialized_here_ = false;
  bool mpi_started_ = false;
  std::string host_;
  std::string launcher_;
  MPI_Comm node_comm_ = MPI_COMM_NULL;
};

/// Ends the whole job now: flushes stdio, then MPI_Abort(MPI_COMM_WORLD, code) when MPI is up
/// (every rank of the job is killed, so none hangs), else _exit(code). Local; never returns.
[[noreturn]] void abort_job(int exit_code);

/// Makes large allocations reuse heap memory instead of fresh mmap()s, which cost ~12 us per
/// 4 KiB page fault on these VMs (README, "Environment variables"). Skipped when
/// HPCTRAIN_MALLOC_TUNING=0 or when the user set MALLOC_MMAP_THRESHOLD_ themselves. Local;
/// call before any large allocation. Returns whether tuning was applied.
bool tune_malloc();
/// Whether tune_malloc() applied its settings in this process. Local.
bool malloc_tuning_applied();

}  // namespace hpctrain::runtime
