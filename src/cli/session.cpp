#include "session.hpp"

#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::cli {

Session make_session(CommandContext& ctx, int tp, int pp) {
  Session session;
  runtime::validate_grid(ctx.runtime.world_size(), tp, pp);  // before any collective
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
