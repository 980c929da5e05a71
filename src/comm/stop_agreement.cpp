#include "hpctrain/comm/stop_agreement.hpp"

#include <vector>

#include "hpctrain/runtime/stop_signals.hpp"

namespace hpctrain::comm {

StopRequest StopAgreement::agree(StopRequest local) {
  std::vector<int> flags{local.signal, local.deadline ? 1 : 0, local.save_due ? 1 : 0,
                         local.save_pending ? 1 : 0, local.save_writing ? 1 : 0};
  group_.reduce(flags, ReduceOp::kMax);
  StopRequest agreed{flags[0], flags[1] != 0, flags[2] != 0, flags[3] != 0, flags[4] != 0};
  if (signal_ == 0) signal_ = agreed.signal;
  return agreed;
}

bool StopAgreement::stop_requested() {
  StopRequest local;
  local.signal = runtime::stop_signal_received();
  return agree(local).signal != 0;
}

}  // namespace hpctrain::comm
