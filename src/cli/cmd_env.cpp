// hpctrain env: a summary of the job's software and layout that users can paste into a bug report.

#include <dlfcn.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "command.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/comm/nccl_communicator.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/hdf5_lock.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/peer_monitor.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

struct EnvOptions {
  int tp = 1;
  int pp = 1;
  bool json = false;
};

std::string hdf5_version() {
  unsigned major = 0, minor = 0, release = 0;
  auto hold = data::lock_hdf5();  // HDF5 is not thread-safe: every call holds the lock
  H5get_libversion(&major, &minor, &release);
  return str(major, ".", minor, ".", release);
}

std::string blas_library() {
  // Debian's LibTorch calls whichever libblas.so.3 the alternatives system selects; OpenBLAS is
  // 3-6x faster than the reference BLAS for the matrix products of training.
  return dlsym(RTLD_DEFAULT, "openblas_get_config") ? "OpenBLAS" : "other (not OpenBLAS)";
}

// Where a rank runs: host, local rank and grid coordinates.
struct Placement {
  char host[64];
  int local_rank, dp_rank, pp_rank, tp_rank;
};

// Every rank's placement, gathered to rank 0 (empty elsewhere). Collective over the world.
std::vector<Placement> gather_placements(Session& session, runtime::Runtime& rt) {
  Placement mine{};
  std::snprintf(mine.host, sizeof(mine.host), "%s", rt.host().c_str());
  mine.local_rank = rt.local_rank();
  mine.dp_rank = session.grid->dp_rank();
  mine.pp_rank = session.grid->pp_rank();
  mine.tp_rank = session.grid->tp_rank();
  const std::vector<std::uint8_t> gathered =
      session.control.world->gather_bytes(&mine, sizeof(Placement));
  std::vector<Placement> all(gathered.size() / sizeof(Placement));
  if (!all.empty()) std::memcpy(all.data(), gathered.data(), gathered.size());
  return all;
}

// "n1: 0,1; n2: 2,3": the world ranks of each host, in order of first appearance.
std::string placement_text(const std::vector<Placement>& all) {
  std::vector<std::pair<std::string, std::string>> hosts;
  for (std::size_t r = 0; r < all.size(); ++r) {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const auto& h) { return h.first == all[r].host; });
    if (it == hosts.end()) {
      hosts.emplace_back(all[r].host, std::to_string(r));
    } else {
      it->second += "," + std::to_string(r);
    }
  }
  std::string placement;
  for (const auto& [host, ranks] : hosts)
    placement += (placement.empty() ? "" : "; ") + host + ": " + ranks;
  return placement;
}

// Rank 0's report: `j` with every rank's placement as JSON, or as text with the grid rank by rank.
void print_env(nlohmann::ordered_json& j, const std::vector<Placement>& all,
               const runtime::ProcessGrid& grid, bool json) {
  if (json) {
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    for (std::size_t r = 0; r < all.size(); ++r) {
      ranks.push_back({{"world_rank", r},
                       {"host", all[r].host},
                       {"local_rank", all[r].local_rank},
                       {"dp_rank", all[r].dp_rank},
                       {"pp_rank", all[r].pp_rank},
                       {"tp_rank", all[r].tp_rank}});
    }
    j["ranks"] = ranks;
    print_json(j);
  } else {
    std::cout << "hpctrain environment\n";
    for (auto& [key, value] : j.items()) {
      std::string text = value.is_string() ? value.get<std::string>() : value.dump();
      std::cout << "  " << key << std::string(key.size() < 24 ? 24 - key.size() : 1, ' ') << text
                << "\n";
    }
    // The grid rank by rank: world = dp x pp x tp, tp innermost (docs/PIPELINE.md, "Grid").
    std::cout << "grid " << grid.describe() << " (world rank = (dp x " << grid.pp_size()
              << " + pp) x " << grid.tp_size() << " + tp)\n";
    for (std::size_t r = 0; r < all.size(); ++r) {
      std::cout << "  rank " << r
                << std::string(r < 10    ? 6
                               : r < 100 ? 5
                                         : 4,
                               ' ')
                << "dp " << all[r].dp_rank << "  pp " << all[r].pp_rank << "  tp " << all[r].tp_rank
                << "  " << all[r].host << " (local rank " << all[r].local_rank << ")\n";
    }
    std::cout << std::flush;
  }
}

int run_env(CommandContext& ctx, const EnvOptions& opt) {
  Session session = make_session(ctx, opt.tp, opt.pp);
  auto& rt = ctx.runtime;

  // Ranks per node may differ between nodes: report the range.
  // [-min, max] of ranks per node and of threads per rank, in one control-plane reduction.
  std::vector<int> ranges{-rt.local_size(), rt.local_size(), -session.device.threads,
                          session.device.threads};
  session.control.world->reduce(ranges, comm::ReduceOp::kMax);
  const int* local_range = ranges.data();
  const int* threads_range = ranges.data() + 2;
  auto range = [](const int* r) {
    return -r[0] == r[1] ? std::to_string(r[1]) : str(-r[0], "-", r[1]);
  };
  const std::vector<Placement> all = gather_placements(session, rt);

  nlohmann::ordered_json j;
  j["hpctrain_version"] = HPCTRAIN_VERSION;
  j["build_type"] = HPCTRAIN_BUILD_TYPE;
  j["libtorch_version"] = compat::torch_version();
  j["mpi_library"] = runtime::Runtime::mpi_library_version();
  j["mpi_standard"] = runtime::Runtime::mpi_standard_version();
  j["mpi_thread_level"] = runtime::Runtime::thread_level_name(rt.thread_level());
  j["launcher"] = rt.launcher();
  j["world_size"] = rt.world_size();
  j["nodes"] = rt.node_count();
  j["ranks_per_node"] = range(local_range);
  j["grid"] = {{"dp", session.grid->dp_size()},
               {"pp", session.grid->pp_size()},
               {"tp", session.grid->tp_size()},
               {"tp_groups_within_nodes", session.grid->tp_groups_within_nodes()}};
  j["host_rank0"] = rt.host();
  j["device"] = session.device.device;
  j["comm_backend"] = session.comms.backend;
  j["cuda_available"] = runtime::cuda_available();
  j["cuda_devices"] = session.device.cuda_device_count;
  // LibTorch's TF32 defaults for float32 CUDA work (run.tf32 in a config sets both).
  j["tf32"] = {{"matmul", compat::tf32().matmul}, {"cudnn", compat::tf32().cudnn}};
  j["nccl"] = comm::nccl_version();
  j["nccl_compiled"] = comm::nccl_compiled();
  j["hdf5_version"] = hdf5_version();
  j["hdf5_parallel"] = static_cast<bool>(HPCTRAIN_HDF5_PARALLEL);
  j["blas"] = blas_library();
  j["malloc_tuning"] = runtime::malloc_tuning_applied();
  j["flush_denormal"] = session.device.flush_denormal;
  j["cpu_onednn"] = session.device.cpu_onednn;
  j["threads_per_rank"] = range(threads_range);
  j["threads_source_rank0"] = session.device.threads_source;
  j["cores_visible_rank0"] = session.device.cores_visible;
  j["collective_timeout_s"] = ctx.global.collective_timeout;
  j["peer_timeout_s"] = runtime::PeerMonitor::timeout();
  j["peer_monitor"] = runtime::PeerMonitor::running() ? std::string("on")
                      : rt.world_size() == 1          ? std::string("off (one rank)")
                      : ctx.global.peer_timeout <= 0  ? std::string("off (--peer-timeout 0)")
                                                     : "off: " + runtime::PeerMonitor::off_reason();
  j["placement"] = placement_text(all);

  if (rt.world_rank() == 0) print_env(j, all, *session.grid, opt.json);
  session.control.world->barrier();
  return 0;
}

const CommandRegistration env_command = command<EnvOptions>(
    "env", "Print versions, MPI layout, grid and devices (paste it into bug reports)",
    [](CLI::App& app, EnvOptions& opt) {
      app.add_option("--tp", opt.tp, "Tensor-parallel size of the grid to report")
          ->check(CLI::PositiveNumber);
      app.add_option("--pp", opt.pp, "Pipeline stages of the grid to report")
          ->check(CLI::PositiveNumber);
      app.add_flag("--json", opt.json, "Print JSON instead of a table");
    },
    run_env);

}  // namespace
}  // namespace hpctrain::cli
