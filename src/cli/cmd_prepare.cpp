// hpctrain prepare fashion-mnist | text | tokens | numpy: converts data into dataset files
// (docs/DATA.md). Under mpirun, fashion-mnist runs on world rank 0 while the others wait for it
// without a watched collective; text splits its documents over the ranks; tokens and numpy split
// their output files over the ranks.

#include <chrono>
#include <thread>

#include "command.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/data/prepare.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::cli {
namespace {

struct PrepareOptions {
  std::string out;
  std::string from;
};

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

// Every rank writes its share; then the ranks agree: the first rank's error (a token outside the
// vocabulary found by whichever rank read it) ends every rank with the same message and code.
int run_on_every_rank(CommandContext& ctx,
                      const std::function<std::vector<data::PreparedFile>(int, int)>& work) {
  auto& rt = ctx.runtime;
  std::vector<data::PreparedFile> written;
  std::string problem;
  int code = 0;
  try {
    written = work(rt.world_rank(), rt.world_size());
  } catch (const Error& e) {
    if (rt.world_size() == 1) throw;
    problem = e.what();
    code = e.exit_code();
  }
  if (rt.world_size() > 1) {
    comm::ControlPlane world(rt.world(), "world");
    if (auto first = world.first_problem(problem)) {
      const std::int64_t worst =
          world.reduce(static_cast<std::int64_t>(code), comm::ReduceOp::kMax);
      const std::string message =
          first->first == 0 ? first->second : str(first->second, " (rank ", first->first, ")");
      if (worst == kExitUsage) throw AgreedConfigError(message);
      throw AgreedDataError(message);
    }
    const std::int64_t files =
        world.reduce(static_cast<std::int64_t>(written.size()), comm::ReduceOp::kSum);
    for (const auto& file : written) log::info(str("wrote ", file.path, ": ", file.what));
    log::info(str(files, " files written by ", rt.world_size(), " ranks"));
    return 0;
  }
  for (const auto& file : written) log::info(str("wrote ", file.path, ": ", file.what));
  return 0;
}

int run_tokens(CommandContext& ctx, const data::TokenPrepareOptions& opt) {
  return run_on_every_rank(ctx, [&opt](int rank, int ranks) {
    std::vector<std::string> args(opt.inputs);
    args.insert(args.end(),
                {"--out", opt.out_dir, "--vocab", str(opt.vocab), "--format", opt.format});
    if (!opt.dtype.empty()) args.insert(args.end(), {"--dtype", opt.dtype});
    if (opt.shard_size > 0) args.insert(args.end(), {"--shard-size", str(opt.shard_size)});
    args.insert(args.end(), {"--val-fraction", str(opt.val_fraction)});
    data::TokenPrepareOptions o = opt;
    o.created_by = command_line("tokens", args);
    o.rank = rank;
    o.ranks = ranks;
    return data::prepare_tokens(o);
  });
}

int run_numpy(CommandContext& ctx, const data::NumpyPrepareOptions& opt) {
  return run_on_every_rank(ctx, [&opt](int rank, int ranks) {
    std::vector<std::string> args{"--inputs", opt.inputs};
    if (!opt.labels.empty()) args.insert(args.end(), {"--labels", opt.labels});
    if (!opt.targets.empty()) args.insert(args.end(), {"--targets", opt.targets});
    args.insert(args.end(), {"--out", opt.out_dir, "--val-fraction", str(opt.val_fraction)});
    if (opt.shard_size > 0) args.insert(args.end(), {"--shard-size", str(opt.shard_size)});
    data::NumpyPrepareOptions o = opt;
    o.created_by = command_line("numpy", args);
    o.rank = rank;
    o.ranks = ranks;
    return data::prepare_numpy(o);
  });
}

int run_fashion_mnist(CommandContext& ctx, const PrepareOptions& opt) {
  return run_on_rank0(ctx, [&opt] {
    const std::string from = opt.from.empty() ? data::find_fashion_mnist_dir() : opt.from;
    log::info(str("reading Fashion-MNIST IDX files from ", from));
    return data::prepare_fashion_mnist(
        from, opt.out, command_line("fashion-mnist", {"--from", from, "--out", opt.out}));
  });
}

int run_text(CommandContext& ctx, const data::TextPrepareOptions& opt) {
  return run_on_every_rank(ctx, [&opt, &ctx](int, int ranks) {
    std::vector<std::string> args;
    for (const auto& in : opt.inputs) args.insert(args.end(), {"--in", in});
    args.insert(args.end(), {"--out", opt.out_dir, "--val-fraction", str(opt.val_fraction),
                             "--tokenizer", opt.tokenizer});
    if (!opt.doc_separator.empty()) args.insert(args.end(), {"--doc-separator", opt.doc_separator});
    data::TextPrepareOptions o = opt;
    o.created_by = command_line("text", args);
    if (ranks == 1) return data::prepare_text(o, nullptr);
    comm::ControlPlane world(ctx.runtime.world(), "world");
    return data::prepare_text(o, &world);
  });
}

const CommandRegistration prepare_fashion_mnist_command = command<PrepareOptions>(
    "prepare fashion-mnist",
    "Convert Fashion-MNIST IDX files (Debian's dataset-fashion-mnist) to train.h5 and test.h5",
    [](CLI::App& app, PrepareOptions& opt) {
      app.add_option("--out", opt.out, "Output directory")->required();
      app.add_option("--from", opt.from,
                     "Directory with the IDX files (default: where dpkg -L "
                     "dataset-fashion-mnist puts them)");
    },
    run_fashion_mnist, runtime::Runtime::Start::kLocal);

const CommandRegistration prepare_text_command = command<data::TextPrepareOptions>(
    "prepare text",
    "Tokenize UTF-8 text files into train.h5 and val.h5 token files (byte-level or a BPE "
    "tokenizer; split over the ranks of mpirun)",
    [](CLI::App& app, data::TextPrepareOptions& opt) {
      app.add_option("--in", opt.inputs, "UTF-8 text files (repeat or list several)")
          ->required()
          ->expected(1, -1);
      app.add_option("--out", opt.out_dir, "Output directory")->required();
      app.add_option("--val-fraction", opt.val_fraction,
                     "Fraction of each file (its tail) that goes to val.h5 (0: train.h5 alone)")
          ->capture_default_str();
      app.add_option("--tokenizer", opt.tokenizer,
                     "bytes, a tokenizer.json (or its folder), a folder with GPT-2's encoder.json "
                     "+ vocab.bpe, or a tiktoken file such as cl100k_base.tiktoken")
          ->capture_default_str();
      app.add_option("--doc-separator", opt.doc_separator,
                     "Documents that get the end-of-text token after them: file, blank-line "
                     "(paragraphs) or none (default: file when the tokenizer has an end-of-text "
                     "token, else none)")
          ->check(CLI::IsMember({"file", "blank-line", "none"}));
    },
    run_text, runtime::Runtime::Start::kLocal);

const CommandRegistration prepare_tokens_command = command<data::TokenPrepareOptions>(
    "prepare tokens",
    "Token files (llm.c .bin, .npy, raw uint16/uint32 arrays) to language-modelling files",
    [](CLI::App& app, data::TokenPrepareOptions& opt) {
      app.add_option("files", opt.inputs, "Token files, concatenated in this order")
          ->required()
          ->expected(1, -1);
      app.add_option("--out", opt.out_dir, "Output directory")->required();
      app.add_option("--vocab", opt.vocab, "Vocabulary size of the tokenizer (50257: GPT-2)")
          ->required();
      app.add_option("--format", opt.format,
                     "auto (by content), npy, llmc (256-int32 header) or raw")
          ->check(CLI::IsMember({"auto", "npy", "llmc", "raw"}))
          ->capture_default_str();
      app.add_option("--dtype", opt.dtype, "Element type of raw files (default uint16)")
          ->check(CLI::IsMember({"uint16", "uint32", "int32"}));
      app.add_option("--shard-size", opt.shard_size,
                     "Tokens per output file: train-00000.h5, ... (default: one train.h5)");
      app.add_option("--val-fraction", opt.val_fraction,
                     "Fraction of each file (its tail) that goes to val.h5 (default 0: none)");
    },
    run_tokens, runtime::Runtime::Start::kLocal);

const CommandRegistration prepare_numpy_command = command<data::NumpyPrepareOptions>(
    "prepare numpy",
    "NumPy .npy arrays to classification (--labels) or regression (--targets) files",
    [](CLI::App& app, data::NumpyPrepareOptions& opt) {
      app.add_option("--inputs", opt.inputs, ".npy of (N, ...) uint8, float32 or float64")
          ->required();
      app.add_option("--labels", opt.labels, ".npy of (N,) integer class indices");
      app.add_option("--targets", opt.targets, ".npy of (N, ...) float32 or float64 targets");
      app.add_option("--num-classes", opt.num_classes,
                     "Number of classes (default: the largest label + 1)");
      app.add_option("--out", opt.out_dir, "Output directory")->required();
      app.add_option("--shard-size", opt.shard_size,
                     "Samples per output file: train-00000.h5, ... (default: one train.h5)");
      app.add_option("--val-fraction", opt.val_fraction,
                     "Fraction of the samples (the last ones) that goes to val.h5 (default 0)");
    },
    run_numpy, runtime::Runtime::Start::kLocal);

}  // namespace
}  // namespace hpctrain::cli
