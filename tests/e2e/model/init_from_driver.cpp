// Test driver of model.init_from: the logits of a gpt's first forward after its weights were
// loaded by checkpoint::init_model_from (what `hpctrain train` calls), at tp = the world size.
//   init_from_driver CONFIG WEIGHTS TOKENS OUT --batch B --seq T
// CONFIG: a YAML file with the model section; TOKENS: B x T int64 token ids, raw little-endian;
// OUT (written by world rank 0): the logits [B, T, vocab_size] as raw float32, every rank's
// vocabulary slice gathered. The load report goes to stdout. Exit: 0, the error's exit code
// (4 for a file that does not fit), 2 usage.

#include <fstream>
#include <iostream>
#include <sstream>

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace {

std::int64_t option(int argc, char** argv, const std::string& name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::stoll(argv[i + 1]);
  }
  std::cerr << "init_from_driver: missing " << name << "\n";
  std::exit(2);
}

}  // namespace

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
  const std::int64_t batch = option(argc, argv, "--batch");
  const std::int64_t seq = option(argc, argv, "--seq");
  const int tp_size = runtime.world_size();
  hpctrain::runtime::ProcessGrid grid(runtime, tp_size);
  auto tp = std::make_shared<hpctrain::comm::MpiCommunicator>(grid.tp_comm(), "tp",
                                                              /*async_thread=*/true);
  try {
    hpctrain::Config config = hpctrain::Config::load(config_path);
    hpctrain::ConfigSection section = config.section("model");
    hpctrain::model::ModelContext ctx{tp, grid.tp_rank(), tp_size, 1234, {}};
    auto model = hpctrain::model::build_model(section, ctx);
    const auto report =
        hpctrain::checkpoint::init_model_from(*model, weights, grid.tp_rank(), tp_size);
    if (runtime.world_rank() == 0) {
      std::cout << "initialised " << report.parameters << " parameters from " << report.source
                << "\n";
      for (const auto& note : report.notes) std::cout << "note: " << note << "\n";
    }
    torch::Tensor tokens = torch::empty({batch, seq}, torch::kLong);
    std::ifstream in(tokens_path, std::ios::binary);
    in.read(static_cast<char*>(tokens.data_ptr()), tokens.numel() * 8);
    if (!in) throw hpctrain::Error("cannot read " + tokens_path);
    model->eval();
    torch::NoGradGuard no_grad;
    const torch::Tensor local = model->forward(tokens);
    const std::int64_t vocab = section.get<std::int64_t>("vocab_size", 256);
    const torch::Tensor logits =
        hpctrain::parallel::gather_logical(local, {{batch, seq, vocab}, 2}, tp).contiguous();
    if (runtime.world_rank() == 0) {
      std::ofstream out(out_path, std::ios::binary);
      out.write(static_cast<const char*>(logits.data_ptr()), logits.numel() * 4);
      if (!out) throw hpctrain::Error("cannot write " + out_path);
    }
  } catch (const hpctrain::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  }
  return 0;
}
