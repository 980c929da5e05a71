// hpctrain inspect data FILE: schema, shapes, dtypes, chunking and a few samples of a dataset
// file, validated exactly as training would validate it.

#include <iostream>

#include "command.hpp"
#include "hpctrain/data/inspect.hpp"
#include "hpctrain/runtime/runtime.hpp"

namespace hpctrain::cli {
namespace {

struct InspectArgs {
  std::string file;
  data::InspectOptions options;
};

int run_inspect_data(CommandContext& ctx, const InspectArgs& opt) {
  // Local work: rank 0 describes the file; other ranks (under mpirun) have nothing to do.
  if (ctx.runtime.world_rank() != 0) return 0;
  std::cout << data::describe_data_file(opt.file, opt.options) << std::flush;
  return 0;
}

const CommandRegistration inspect_data_command = command<InspectArgs>(
    "inspect data", "Describe a dataset file: schema, shapes, dtypes, chunking, first samples",
    [](CLI::App& app, InspectArgs& opt) {
      app.add_option("file", opt.file, "HDF5 dataset file")->required();
      app.add_option("--samples", opt.options.samples, "Samples to show")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
      app.add_option("--seq-len", opt.options.seq_len,
                     "Window length for token files (they do not store one)")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--batch-size", opt.options.batch_size,
                     "Per-rank batch (data.batch_size) the memory figure is given for")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      app.add_option("--prefetch", opt.options.prefetch,
                     "Batches read ahead (data.prefetch) in the memory figure")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
    },
    run_inspect_data, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
