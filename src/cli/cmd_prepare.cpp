// hpctrain prepare fashion-mnist | text: converts public data into dataset files (docs/DATA.md).
// Under mpirun only world rank 0 writes; the others wait for it without a watched collective.

#include <chrono>
#include <thread>

#include "command.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

struct PrepareOptions {
  std::string out;
  std::string from;
  std::vector<std::string> inputs;
  double val_fraction = 0.1;
};
PrepareOptions g_prep;

std::string command_line(const std::string& name, const std::vector<std::string>& args) {
  std::string line = str("hpctrain ", HPCTRAIN_VERSION, ": hpctrain prepare ", name);
  for (const auto& arg : args) line += " " + arg;
  return line;
}

// Rank 0 runs `work`; the other ranks wait at a barrier that they poll, not a watched blocking
// collective, so a long conversion never trips the collective timeout. If rank 0 fails, main()
// aborts the job, which ends the waiting ranks too.
int run_on_rank0(CommandContext& ctx,
                 const std::function<std::vector<data::PreparedFile>()>& work) {
  auto& rt = ctx.runtime;
  if (rt.world_rank() == 0) {
    for (const auto& file : work()) log::info(str("wrote ", file.path, ": ", file.what));
  }
  if (rt.world_size() > 1) comm::ControlPlane(rt.world(), "world").broadcast_idle("done");
  return 0;
}

int run_fashion_mnist(CommandContext& ctx) {
  return run_on_rank0(ctx, [] {
    const std::string from = g_prep.from.empty() ? data::find_fashion_mnist_dir() : g_prep.from;
    log::info(str("reading Fashion-MNIST IDX files from ", from));
    return data::prepare_fashion_mnist(
        from, g_prep.out, command_line("fashion-mnist", {"--from", from, "--out", g_prep.out}));
  });
}

int run_text(CommandContext& ctx) {
  return run_on_rank0(ctx, [] {
    std::vector<std::string> args;
    for (const auto& in : g_prep.inputs) args.insert(args.end(), {"--in", in});
    args.insert(args.end(), {"--out", g_prep.out, "--val-fraction", str(g_prep.val_fraction)});
    return data::prepare_text(g_prep.inputs, g_prep.out, g_prep.val_fraction,
                              command_line("text", args));
  });
}

CommandRegistration fashion_mnist(
    "prepare fashion-mnist",
    "Convert Fashion-MNIST IDX files (Debian's dataset-fashion-mnist) to train.h5 and test.h5",
    [](CLI::App& app) {
      app.add_option("--out", g_prep.out, "Output directory")->required();
      app.add_option("--from", g_prep.from,
                     "Directory with the IDX files (default: where dpkg -L "
                     "dataset-fashion-mnist puts them)");
    },
    run_fashion_mnist, runtime::Runtime::Start::kLocal);

CommandRegistration text(
    "prepare text",
    "Byte-level tokenization of UTF-8 text files into train.h5 and val.h5 token files",
    [](CLI::App& app) {
      app.add_option("--in", g_prep.inputs, "UTF-8 text files (repeat or list several)")
          ->required()
          ->expected(1, -1);
      app.add_option("--out", g_prep.out, "Output directory")->required();
      app.add_option("--val-fraction", g_prep.val_fraction,
                     "Fraction of each file (its tail) that goes to val.h5")
          ->capture_default_str();
    },
    run_text, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
