// Test driver of model.init_from: the logits of a gpt's first forward after its weights were
// loaded by checkpoint::init_model_from (what `hpctrain train` calls), at tp = the world size.
//   init_from_driver CONFIG WEIGHTS TOKENS OUT --batch B --seq T
// CONFIG: a YAML file with the model section; TOKENS: B x T int64 token ids, raw little-endian;
// OUT (written by world rank 0): the logits [B, T, vocab_size] as raw float32, every rank's
// vocabulary slice gathered. The load report goes to stdout. Exit: 0, the error's exit code
// (4 for a file that does not fit), 2 usage.

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "logits_driver.hpp"

namespace t = hpctrain::testing;

int main(int argc, char** argv) {
  if (argc < 9) {
    std::cerr << "usage: init_from_driver CONFIG WEIGHTS TOKENS OUT --batch B --seq T\n";
    return 2;
  }
  hpctrain::runtime::Runtime runtime(&argc, &argv);
  hpctrain::log::configure(runtime.world_rank(), runtime.host(), hpctrain::log::Level::kWarn,
                           false);
  const std::string config_path = argv[1], weights = argv[2], tokens_path = argv[3],
                    out_path = argv[4];
  const std::int64_t batch = t::int_option(argc, argv, "--batch", "init_from_driver");
  const std::int64_t seq = t::int_option(argc, argv, "--seq", "init_from_driver");
  const int tp_size = runtime.world_size();
  hpctrain::runtime::ProcessGrid grid(runtime, tp_size);
  auto tp = std::make_shared<hpctrain::comm::MpiCommunicator>(grid.tp_comm(), "tp",
                                                              /*async_thread=*/true);
  return t::run_driver([&] {
    hpctrain::Config config = hpctrain::Config::load(config_path);
    hpctrain::ConfigSection section = config.section("model");
    auto model = t::build_driver_model(section, tp, grid, tp_size);
    const auto report =
        hpctrain::checkpoint::init_model_from(*model, weights, grid.tp_rank(), tp_size);
    if (runtime.world_rank() == 0) t::print_load_report(report, /*with_warnings=*/false);
    const torch::Tensor tokens = t::read_tokens(tokens_path, batch, seq);
    model->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor local = model->forward(tokens);
    const std::int64_t vocab = section.get<std::int64_t>("vocab_size", 256);
    const torch::Tensor logits =
        hpctrain::parallel::gather_logical(local, {{batch, seq, vocab}, 2}, tp).contiguous();
    if (runtime.world_rank() == 0) t::write_logits(logits, out_path);
  });
}
