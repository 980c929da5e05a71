#pragma once
// What the logits drivers of model.init_from (init_from_driver.cpp) and of the llama family's
// Hugging Face folders (llama_hf_driver.cpp) share: their integer options, the model built on
// the tp group, the load report printed, the token ids read, the logits written, and the exit
// code of an error.

#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/comm/mpi_communicator.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/process_grid.hpp"

namespace hpctrain::testing {

/// The integer after `name` in argv; without one the process ends with exit 2, `driver` naming
/// it on stderr. Local.
inline std::int64_t int_option(int argc, char** argv, const std::string& name,
                               const std::string& driver) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == name) return std::stoll(argv[i + 1]);
  }
  std::cerr << driver << ": missing " << name << "\n";
  std::exit(2);
}

/// The model of `section` (seed 1234) on this rank's tp group of `grid`, pipeline part `part`.
/// Collective over the tp group.
inline std::shared_ptr<model::Model> build_driver_model(
    ConfigSection& section, const std::shared_ptr<comm::MpiCommunicator>& tp,
    const runtime::ProcessGrid& grid, int tp_size, model::PipelinePart part = {}) {
  model::ModelContext ctx{tp, grid.tp_rank(), tp_size, 1234, part};
  return model::build_model(section, ctx);
}

/// Prints what init_model_from loaded: the count and source, its notes, and (with
/// `with_warnings`) its warnings. Local (the drivers call it on world rank 0).
inline void print_load_report(const checkpoint::InitFromReport& report, bool with_warnings) {
  std::cout << "initialised " << report.parameters << " parameters from " << report.source << "\n";
  for (const auto& note : report.notes) std::cout << "note: " << note << "\n";
  if (!with_warnings) return;
  for (const auto& warning : report.warnings) std::cout << "warning: " << warning << "\n";
}

/// `batch` x `seq` int64 token ids from a raw little-endian file. Local.
inline torch::Tensor read_tokens(const std::string& path, std::int64_t batch, std::int64_t seq) {
  torch::Tensor tokens = torch::empty({batch, seq}, torch::kLong);
  std::ifstream in(path, std::ios::binary);
  in.read(static_cast<char*>(tokens.data_ptr()), tokens.numel() * 8);
  if (!in) throw Error("cannot read " + path);
  return tokens;
}

/// Writes contiguous float32 `logits` raw to `path`. Local.
inline void write_logits(const torch::Tensor& logits, const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(logits.data_ptr()), logits.numel() * 4);
  if (!out) throw Error("cannot write " + path);
}

/// Runs `body`; an hpctrain error is printed on stderr and its exit code returned. Local.
inline int run_driver(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  }
  return 0;
}

}  // namespace hpctrain::testing
