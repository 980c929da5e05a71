// Test driver of the llama family with Hugging Face folders: the logits of the model's first
// forward after model.init_from (checkpoint::init_model_from, what `hpctrain train` calls), on a
// grid of tp x pp ranks (world = tp x pp).
//   llama_hf_driver CONFIG TOKENS OUT --batch B --seq T --tp N --pp M
// CONFIG: a YAML file whose model section names the folder in model.init_from (its config.json
// sets the model keys); TOKENS: B x T int64 token ids, raw little-endian; OUT (written by world
// rank of the last stage's tp rank 0): the logits [B, T, vocab_size] as raw float32. With pp = 2
// the first stage's activations reach the second by a broadcast over the pp group. The load
// report goes to stdout. Exit: 0, the error's exit code (4: the folder does not fit; 2: the
// config), 2 usage.

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "logits_driver.hpp"

namespace t = hpctrain::testing;

int main(int argc, char** argv) {
  if (argc < 12) {
    std::cerr << "usage: llama_hf_driver CONFIG TOKENS OUT --batch B --seq T --tp N --pp M\n";
    return 2;
  }
  hpctrain::runtime::Runtime runtime(&argc, &argv);
  hpctrain::log::configure(runtime.world_rank(), runtime.host(), hpctrain::log::Level::kInfo,
                           false);
  const std::string config_path = argv[1], tokens_path = argv[2], out_path = argv[3];
  const std::int64_t batch = t::int_option(argc, argv, "--batch", "llama_hf_driver");
  const std::int64_t seq = t::int_option(argc, argv, "--seq", "llama_hf_driver");
  const int tp_size = static_cast<int>(t::int_option(argc, argv, "--tp", "llama_hf_driver"));
  const int pp_size = static_cast<int>(t::int_option(argc, argv, "--pp", "llama_hf_driver"));
  hpctrain::runtime::ProcessGrid grid(runtime, tp_size, pp_size);
  auto tp = std::make_shared<hpctrain::comm::MpiCommunicator>(grid.tp_comm(), "tp",
                                                              /*async_thread=*/true);
  auto pp = std::make_shared<hpctrain::comm::MpiCommunicator>(grid.pp_comm(), "pp",
                                                              /*async_thread=*/false);
  return t::run_driver([&] {
    hpctrain::Config config = hpctrain::Config::load(config_path);
    hpctrain::ConfigSection section = config.section("model");
    const auto spec = hpctrain::model::ModelSpec::from(section);
    hpctrain::model::PipelinePart part;
    part.pp = pp_size;
    part.rank = pp->rank();
    auto model = t::build_driver_model(section, tp, grid, tp_size, part);
    config.check_unknown_keys();
    const auto report =
        hpctrain::checkpoint::init_model_from(*model, spec.init_from, grid.tp_rank(), tp_size);
    if (runtime.world_rank() == 0) t::print_load_report(report, /*with_warnings=*/true);
    const torch::Tensor tokens = t::read_tokens(tokens_path, batch, seq);
    model->eval();
    torch::NoGradGuard no_grad;
    torch::Tensor local;
    if (pp_size == 1) {
      local = model->forward(tokens);
    } else {
      // Stage 0 -> broadcast over the pp group -> stage 1 (pp = 2).
      torch::Tensor act = pp->rank() == 0 ? model->forward_chunk(0, tokens).contiguous()
                                          : torch::empty(model->stage_activation_shape(tokens));
      pp->broadcast(act, 0);
      if (pp->rank() == 1) local = model->forward_chunk(0, act);
    }
    if (local.defined()) {
      const torch::Tensor logits =
          hpctrain::parallel::gather_logical(local, {{batch, seq, spec.vocab_size}, 2}, tp)
              .contiguous();
      if (grid.tp_rank() == 0) t::write_logits(logits, out_path);
    }
  });
}
