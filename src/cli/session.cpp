#include "session.hpp"

#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {

RunConfig load_run_config(CommandContext& ctx, const std::string& path,
                          const std::vector<std::string>& overrides) {
  RunConfig run;
  comm::ControlPlane world(ctx.runtime.world(), "world");
  comm::StartupAgreement startup(world);
  startup.run([&] {
    run.config = Config::load(path);
    for (const auto& assignment : overrides) run.config.set(assignment);
    run.parallel = parallel::ParallelConfig::of(run.config);
    const int world_size = ctx.runtime.world_size();
    runtime::validate_grid(world_size, run.parallel.tp, run.parallel.pp);
    const int dp = world_size / (run.parallel.tp * run.parallel.pp);
    const int group = run.parallel.shard_group;
    if (run.parallel.shard != parallel::ShardMode::kNone && group > 0 && dp % group != 0) {
      throw ConfigError(str("parallel.shard_group = ", group, " does not divide the ", dp,
                            " ranks of the data-parallel group (", world_size, " ranks / (tp ",
                            run.parallel.tp, " x pp ", run.parallel.pp, ")): give a divisor of ",
                            dp, ", node or dp"));
    }
  });
  return run;
}

Session make_session(CommandContext& ctx, int tp, int pp) {
  Session session;
  // Every rank checks the same shape: one message (comm/startup_agreement.hpp).
  {
    comm::ControlPlane world(ctx.runtime.world(), "world");
    comm::StartupAgreement(world).run(
        [&] { runtime::validate_grid(ctx.runtime.world_size(), tp, pp); });
  }
  session.grid = std::make_unique<runtime::ProcessGrid>(ctx.runtime, tp, pp);
  session.device = runtime::bind_device(
      ctx.runtime, runtime::DeviceRequest{ctx.global.threads, ctx.global.device});
  session.comms = comm::make_group_communicators(ctx.runtime, *session.grid, session.device,
                                                 ctx.global.comm_backend);
  session.control = comm::make_control_groups(*session.grid);
  return session;
}

comm::Environment environment(const CommandContext& ctx, const Session& session) {
  return comm::Environment{ctx.runtime, *session.grid, session.device, session.comms};
}

}  // namespace hpctrain::cli
