// model.init_from for the trainer: load, agree, log (init_weights.hpp).

#include "init_weights.hpp"

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

void init_weights_from(model::Model& model, const std::string& path, comm::Environment& env) {
  checkpoint::InitFromReport report;
  comm::StartupAgreement agreement(*env.control.world);
  agreement.run([&] {
    report = checkpoint::init_model_from(model, path, env.grid.tp_rank(), env.grid.tp_size());
  });
  log::info(str("model.init_from: initialised ", report.parameters, " parameters",
                report.buffers > 0 ? str(" and ", report.buffers, " buffers") : std::string(),
                " from ", report.source, "; the optimizer starts fresh at step 0"));
  for (const std::string& note : report.notes) log::info("  model.init_from: " + note);
  for (const std::string& warning : report.warnings) log::warn("model.init_from: " + warning);
}

}  // namespace hpctrain::train
