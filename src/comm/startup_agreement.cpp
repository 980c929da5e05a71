#include "hpctrain/comm/startup_agreement.hpp"

#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::comm {

void StartupAgreement::agree(const Error* mine) {
  const std::string problem =
      mine == nullptr ? std::string() : str(mine->exit_code(), " ", mine->what());
  const auto first = world_.first_problem(problem);
  if (!first) return;
  const std::string& text = first->second;
  const std::size_t space = text.find(' ');
  const int code = std::stoi(text.substr(0, space));
  std::string message = text.substr(space + 1);
  if (first->first != 0) message = str("rank ", first->first, ": ", message);
  switch (code) {
    case kExitUsage: throw AgreedConfigError(message);
    case kExitData: throw AgreedDataError(message);
    case kExitCheckpoint: throw AgreedCheckpointError(message);
    default: throw AgreedError(message, code);
  }
}

}  // namespace hpctrain::comm
