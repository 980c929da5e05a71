#include "hpctrain/runtime/runtime.hpp"

#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "hpctrain/runtime/abort_hooks.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/mpi_check.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/watchdog.hpp"

namespace hpctrain::runtime {
namespace {

Runtime* g_current = nullptr;
bool g_malloc_tuned = false;

std::string detect_launcher() {
  // srun sets SLURM_STEP_ID for each step; mpirun (OpenMPI) sets OMPI_COMM_WORLD_SIZE; other
  // launchers (Hydra, PMIx tools) set PMI_SIZE or PMIX_RANK.
  if (std::getenv("SLURM_STEP_ID") && std::getenv("SLURM_PROCID")) return "srun";
  if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK"))
    return "mpirun";
  return "none";
}

}  // namespace

Runtime::Runtime(int* argc, char*** argv, Start start) {
  // Before MPI_Init: a singleton MPI_Init sets launcher variables of its own.
  launcher_ = detect_launcher();
  int already = 0;
  MPI_Initialized(&already);
  if (start == Start::kLocal && launcher_ == "none" && !already) {
    char name[256] = {0};
    if (gethostname(name, sizeof name - 1) == 0) host_ = name;
    thread_level_ = MPI_THREAD_MULTIPLE;  // no MPI: nothing restricts threads
    log::configure(world_rank_, host_, log::level(), false);
    g_current = this;
    return;
  }
  mpi_started_ = true;
  if (!already) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      throw CommError(
          "MPI_Init_thread failed: start hpctrain with mpirun/srun, or check that the "
          "MPI library it was built against is loaded (module list)");
    }
    initialized_here_ = true;
    thread_level_ = provided;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  // Errors come back as return codes so HPCTRAIN_MPI_CHECK can name the call and rank; the
  // default handler would abort without saying which operation failed.
  HPCTRAIN_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));

  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int name_length = 0;
  HPCTRAIN_MPI_CHECK(MPI_Get_processor_name(name, &name_length));
  host_.assign(name, static_cast<std::size_t>(name_length));

  HPCTRAIN_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_,
                                         MPI_INFO_NULL, &node_comm_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_rank(node_comm_, &local_rank_));
  HPCTRAIN_MPI_CHECK(MPI_Comm_size(node_comm_, &local_size_));
  int leader = local_rank_ == 0 ? 1 : 0;
  HPCTRAIN_MPI_CHECK(MPI_Allreduce(&leader, &node_count_, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  log::configure(world_rank_, host_, log::level(), false);
  g_current = this;
}

Runtime::~Runtime() {
  Watchdog::stop();
  PeerMonitor::stop();  // goodbye to the neighbours first: ranks reach MPI_Finalize at different
                        // times
  g_current = nullptr;
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized_here_ && !finalized) MPI_Finalize();
}

MPI_Comm Runtime::world() const {
  if (!mpi_started_) {
    throw Error("internal error: a one-process command asked for MPI_COMM_WORLD without MPI");
  }
  return MPI_COMM_WORLD;
}

Runtime* Runtime::current() {
  return g_current;
}

std::string Runtime::mpi_standard_version() {
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string Runtime::mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int length = 0;
  MPI_Get_library_version(text, &length);
  std::string version(text, static_cast<std::size_t>(length));
  auto end = version.find_first_of("\n,");
  return end == std::string::npos ? version : version.substr(0, end);
}

std::string Runtime::thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return str("unknown (", level, ")");
  }
}

namespace {
struct AbortHooks {
  std::mutex mutex;
  std::map<int, std::function<void()>> hooks;
  int next = 0;
  bool ran = false;
};
AbortHooks& abort_hooks() {
  static AbortHooks* hooks = new AbortHooks;  // never destroyed: abort may come during exit
  return *hooks;
}
}  // namespace

int add_abort_hook(std::function<void()> hook) {
  auto& h = abort_hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.hooks.emplace(h.next, std::move(hook));
  return h.next++;
}

void remove_abort_hook(int id) {
  auto& h = abort_hooks();
  std::lock_guard<std::mutex> lock(h.mutex);
  h.hooks.erase(id);
}

void run_abort_hooks() {
  auto& h = abort_hooks();
  std::map<int, std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    if (h.ran) return;
    h.ran = true;
    hooks.swap(h.hooks);
  }
  for (auto it = hooks.rbegin(); it != hooks.rend(); ++it) it->second();
}

void abort_job(int exit_code) {
  run_abort_hooks();  // e.g. ncclCommAbort: kernels waiting for a lost peer must not hold us
  PeerMonitor::announce_abort(
      exit_code);  // an intended end, not a lost rank: the others stay quiet
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  _exit(exit_code);
}

bool tune_malloc() {
  const char* opt_out = std::getenv("HPCTRAIN_MALLOC_TUNING");
  if (opt_out && std::string(opt_out) == "0") return false;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_")) return false;  // the user chose already
  // Keep freed memory in the heap: the next step's activations and MPI's temporary buffers then
  // reuse already-faulted pages instead of mmap-ing (and page-faulting) fresh ones each time.
  const int kOneGiB = 1 << 30;
  bool ok = mallopt(M_MMAP_THRESHOLD, kOneGiB) == 1;
  ok = (mallopt(M_TRIM_THRESHOLD, kOneGiB) == 1) && ok;
  g_malloc_tuned = ok;
  return ok;
}

bool malloc_tuning_applied() {
  return g_malloc_tuned;
}

}  // namespace hpctrain::runtime
