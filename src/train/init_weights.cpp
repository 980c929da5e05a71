// model.init_from for the trainer: load, agree, log (init_weights.hpp).

#include "init_weights.hpp"

#include <utility>
#include <vector>

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

void init_weights_from(model::Model& model, const std::string& path, comm::Environment& env,
                       parallel::DataParallelStrategy& dp) {
  checkpoint::InitFromReport report;
  dp.parameters_ready();
  // `full`: the master copy is this rank's float32 chunks. The model's parameters are views of
  // the gathered units, bfloat16 under parallel.param_dtype: bfloat16, where the file's values
  // would be rounded once on their way in. So they point into a float32 copy of the layout (the
  // current values, for anything the file leaves alone) while the file is read.
  torch::Tensor master =
      dp.parameter_load_target().defined() ? dp.master_parameters() : torch::Tensor();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> moved;  // parameter, its own data
  if (master.defined()) {
    torch::NoGradGuard no_grad;
    for (const parallel::LayoutEntry& e : dp.layout()) {
      torch::Tensor param = e.param;
      moved.emplace_back(param, param.data());
      param.set_data(master.narrow(0, e.offset, e.numel).view(param.sizes()));
    }
  }
  comm::StartupAgreement agreement(*env.control.world);
  try {
    agreement.run([&] {
      report = checkpoint::init_model_from(model, path, env.grid.tp_rank(), env.grid.tp_size());
    });
  } catch (...) {
    for (auto& [param, data] : moved) param.set_data(data);
    throw;
  }
  for (auto& [param, data] : moved) param.set_data(data);
  if (master.defined()) {
    dp.restore_parameters(master);
  } else {
    dp.parameters_written();
  }
  log::info(str("model.init_from: initialised ", report.parameters, " parameters",
                report.buffers > 0 ? str(" and ", report.buffers, " buffers") : std::string(),
                " from ", report.source, "; the optimizer starts fresh at step 0"));
  for (const std::string& note : report.notes) log::info("  model.init_from: " + note);
  for (const std::string& warning : report.warnings) log::warn("model.init_from: " + warning);
}

}  // namespace hpctrain::train
