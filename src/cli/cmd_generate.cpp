// hpctrain generate: continue prompts with a language model from a checkpoint or from a config's
// model.init_from weights (docs/GENERATE.md). Prompts from the command line or a file, batched;
// greedy or sampled; a KV cache unless --no-kv-cache; tensor-parallel under mpirun (--tp), the
// prompts split over the data-parallel groups; text decoded with the run's tokenizer
// (data.tokenizer, or --tokenizer).

#include <filesystem>
#include <fstream>
#include <iostream>

#include "command.hpp"
#include "hpctrain/checkpoint/checkpoint_manager.hpp"
#include "hpctrain/checkpoint/init_from.hpp"
#include "hpctrain/checkpoint/verify.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/eval/generator.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/kv_cache.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "output.hpp"
#include "session.hpp"

namespace hpctrain::cli {
namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::string checkpoint;
  std::string config;
  std::vector<std::string> overrides;
  std::vector<std::string> prompts;
  std::string prompts_file;
  std::string tokenizer;
  std::vector<std::string> stop;
  std::vector<std::int64_t> stop_ids;
  bool ignore_eot = false;
  bool no_cache = false;
  bool json = false;
  int tp = 1;
  eval::GenerateOptions options;
};

// The prompts, one per line of the file (empty lines skipped), after the --prompt ones.
std::vector<std::string> read_prompts(const GenerateArgs& a) {
  std::vector<std::string> prompts = a.prompts;
  if (!a.prompts_file.empty()) {
    runtime::require_regular_file(a.prompts_file, runtime::FileKind::kConfig, "--prompts file",
                                  "give a text file with one prompt per line");
    std::ifstream in(a.prompts_file);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) prompts.push_back(line);
    }
  }
  if (prompts.empty()) {
    throw ConfigError("no prompt: give --prompt TEXT (repeatable) or --prompts FILE");
  }
  return prompts;
}

// The model's config: the checkpoint's stored one, or --config with --set overrides.
eval::RunConfig read_config(const GenerateArgs& a, std::string& checkpoint_dir) {
  if (!a.checkpoint.empty()) {
    checkpoint_dir = checkpoint::checkpoint_dir_of(a.checkpoint);
    const std::string run_dir = fs::path(checkpoint_dir).parent_path().parent_path().string();
    std::string origin;
    const std::string text = eval::RunConfig::read_text(checkpoint_dir, run_dir, origin);
    auto config = eval::RunConfig::parse_stored(text, origin, checkpoint_dir);
    if (!a.overrides.empty()) {
      Config c = Config::parse(text, origin);
      for (const auto& s : a.overrides) c.set(s);
      return eval::RunConfig(c.dump(), origin + " with --set");
    }
    return config;
  }
  Config c = Config::load(a.config);
  for (const auto& s : a.overrides) c.set(s);
  eval::RunConfig config(c.dump(), a.config);
  if (config.model().init_from.empty()) {
    throw ConfigError(str(a.config,
                          ": model.init_from is not set: generate from --checkpoint, or "
                          "give the config the weights to start from (model.init_from)"));
  }
  return config;
}

// Stop tokens: --stop texts (a special token, or text of exactly one token), --stop-id ids, and
// the end-of-text token unless --ignore-eot.
std::vector<std::int64_t> stop_tokens(const GenerateArgs& a, const data::Tokenizer& tok,
                                      std::int64_t vocab) {
  std::vector<std::int64_t> ids = a.stop_ids;
  for (const auto& s : a.stop) {
    if (auto id = tok.token_id(s)) {
      ids.push_back(*id);
      continue;
    }
    const auto encoded = tok.encode(s);
    if (encoded.size() != 1) {
      throw ConfigError(
          str("--stop '", s, "' is ", encoded.size(),
              " tokens in this tokenizer; a stop token is one token (use --stop-id)"));
    }
    ids.push_back(encoded.front());
  }
  if (!a.ignore_eot) {
    if (auto eot = tok.eot_id()) ids.push_back(*eot);
  }
  for (auto id : ids) {
    if (id < 0 || id >= vocab) {
      throw ConfigError(
          str("stop token id ", id, " is outside the model's vocabulary [0, ", vocab, ")"));
    }
  }
  return ids;
}

nlohmann::ordered_json continuation_json(const std::string& prompt,
                                         const std::vector<std::int64_t>& prompt_tokens,
                                         std::size_t index, const eval::Continuation& c,
                                         const data::Tokenizer& tok) {
  return {{"prompt_index", index},        {"prompt", prompt},   {"prompt_tokens", prompt_tokens},
          {"text", tok.decode(c.tokens)}, {"tokens", c.tokens}, {"finish_reason", c.finish_reason}};
}

// Every prompt holds a token and leaves the model's context room for a new one.
void check_prompt_lengths(model::Model& model,
                          const std::vector<std::vector<std::int64_t>>& prompts) {
  const std::int64_t context = model::context_length(model);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto length = static_cast<std::int64_t>(prompts[i].size());
    if (length < 1) throw DataError(str("prompt ", i + 1, " has no tokens: give some text"));
    if (context > 0 && length >= context) {
      throw DataError(str("prompt ", i + 1, " has ", length, " tokens; the model reads at most ",
                          context,
                          " (model.seq_len), leaving no room for a new token: "
                          "shorten it"));
    }
  }
}

// The continuations of every world rank that is a multiple of `tp_size` (tp rank 0 of its dp
// group), in rank order: the prompts in order. Collective over the world.
std::vector<nlohmann::ordered_json> gather_blocks(comm::ControlPlane& world, int tp_size,
                                                  const nlohmann::ordered_json& block) {
  std::vector<nlohmann::ordered_json> all;
  for (int r = 0; r < world.size(); r += tp_size) {
    const std::string text = world.broadcast(
        world.rank() == r ? block.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                          : std::string(),
        r);
    for (auto& item : nlohmann::ordered_json::parse(text)) all.push_back(std::move(item));
  }
  return all;
}

int run_generate(CommandContext& ctx, GenerateArgs& a) {
  if (a.checkpoint.empty() == a.config.empty()) {
    throw ConfigError("give one of --checkpoint PATH or --config FILE (with model.init_from)");
  }
  a.options.use_cache = !a.no_cache;
  eval::check_generate_options(a.options, "--");
  Session session = make_session(ctx, a.tp);
  const auto& grid = *session.grid;
  std::optional<eval::RunConfig> config;
  std::shared_ptr<model::Model> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::vector<std::string> texts;
  std::vector<std::vector<std::int64_t>> prompts;
  std::string checkpoint_dir;
  // Every check on every rank before the first collective; one agreed message.
  comm::StartupAgreement(*session.control.world).run([&] {
    config.emplace(read_config(a, checkpoint_dir));
    tokenizer = data::load_tokenizer(a.tokenizer.empty() ? config->data().tokenizer : a.tokenizer);
    if (tokenizer->vocab_size() > config->model().vocab_size) {
      throw ConfigError(str("the tokenizer (", tokenizer->identity(), ") has ",
                            tokenizer->vocab_size(), " tokens, the model ",
                            config->model().vocab_size,
                            ": give the tokenizer the model was trained with (--tokenizer)"));
    }
    texts = read_prompts(a);
    for (const auto& t : texts) prompts.push_back(tokenizer->encode(t));
    a.options.stop_tokens = stop_tokens(a, *tokenizer, config->model().vocab_size);
    model::ModelContext mctx{session.comms.tp, grid.tp_rank(), grid.tp_size(), 0, {}};
    torch::manual_seed(0);
    model = config->build_model(mctx);
    if (model->task() != Task::kLanguageModel) {
      throw ConfigError(str(config->origin(), ": model.name ", config->model().name,
                            " is not a language model: generate continues text"));
    }
    check_prompt_lengths(*model, prompts);
    if (checkpoint_dir.empty()) {
      const auto report = checkpoint::init_model_from(*model, config->model().init_from,
                                                      grid.tp_rank(), grid.tp_size());
      log::info(str("model.init_from: ", report.parameters, " parameters from ", report.source));
    }
  });
  if (!checkpoint_dir.empty()) {
    const std::string run_dir = fs::path(checkpoint_dir).parent_path().parent_path().string();
    checkpoint::CheckpointManager manager(run_dir, grid, checkpoint::ManagerOptions{});
    const auto verified = manager.resolve(checkpoint_dir);
    auto records = eval::model_records(*model);
    manager.load(*verified, records);
    log::info(str("loaded ", *verified));
  }
  model->to(
      session.device.cuda_index >= 0
          ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(session.device.cuda_index))
          : torch::Device(torch::kCPU));

  // This data-parallel group's prompts: a contiguous block.
  const auto n = static_cast<std::int64_t>(prompts.size());
  const std::int64_t first = n * grid.dp_rank() / grid.dp_size();
  const std::int64_t last = n * (grid.dp_rank() + 1) / grid.dp_size();
  const std::vector<std::vector<std::int64_t>> mine(prompts.begin() + first,
                                                    prompts.begin() + last);
  const eval::Generation g = eval::generate(*model, mine, a.options);
  nlohmann::ordered_json block = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < g.continuations.size(); ++i) {
    const auto index = static_cast<std::size_t>(first) + i;
    block.push_back(
        continuation_json(texts[index], prompts[index], index, g.continuations[i], *tokenizer));
  }
  // The dp groups' blocks reach world rank 0 in prompt order (tp rank 0 of each group sends).
  auto& world = *session.control.world;
  const std::vector<nlohmann::ordered_json> all = gather_blocks(world, grid.tp_size(), block);
  const double seconds = world.max(g.seconds);
  const double first_token = world.max(g.first_token_seconds);
  const double tokens = world.sum(static_cast<double>(g.new_tokens)) / grid.tp_size();
  if (world.rank() == 0) {
    for (const auto& item : all) {
      if (a.json) {
        print_json(item, false);
      } else {
        std::cout << "--- prompt " << item["prompt_index"].get<int>() + 1 << " ("
                  << item["tokens"].size() << " new tokens, "
                  << item["finish_reason"].get<std::string>() << ")\n"
                  << item["prompt"].get<std::string>() << item["text"].get<std::string>() << "\n";
      }
    }
    std::cout.flush();
  }
  if (world.rank() == 0 && a.json) {
    print_json({{"new_tokens", static_cast<std::int64_t>(tokens)},
                {"prompts", n},
                {"seconds", seconds},
                {"tokens_per_s", seconds > 0 ? tokens / seconds : 0},
                {"first_token_seconds", first_token},
                {"batch_size", a.options.batch_size},
                {"kv_cache", g.cached},
                {"grid", {{"dp", grid.dp_size()}, {"tp", grid.tp_size()}}}},
               false);
  }
  log::info(str("generated ", static_cast<std::int64_t>(tokens), " tokens for ", n, " prompts in ",
                number_text(seconds), " s: ", number_text(seconds > 0 ? tokens / seconds : 0),
                " tokens/s, time to first token ", number_text(first_token * 1000), " ms (batch ",
                a.options.batch_size, ", ",
                g.cached ? "KV cache" : "no KV cache: the whole sequence every step", ", ",
                grid.describe(), ")"));
  return kExitOk;
}

const CommandRegistration generate_command = command<GenerateArgs>(
    "generate", "Continue prompts with a language model (checkpoint or model.init_from)",
    [](CLI::App& app, GenerateArgs& a) {
      app.add_option("--checkpoint", a.checkpoint,
                     "A checkpoint directory (step_<N>), or a run directory for its newest one");
      app.add_option("-c,--config", a.config,
                     "A config whose model.init_from names the weights (instead of --checkpoint)");
      app.add_option("--set", a.overrides, "Override a config key: --set model.seq_len=256");
      app.add_option("--prompt", a.prompts, "A prompt (repeatable)");
      app.add_option("--prompts", a.prompts_file, "A text file of prompts, one per line");
      app.add_option(
          "--tokenizer", a.tokenizer,
          "Tokenizer (bytes, tokenizer.json, folder, .tiktoken; default data.tokenizer)");
      app.add_option("--max-new-tokens", a.options.max_new_tokens,
                     "New tokens per prompt at most (default 64; fewer when the context ends)");
      app.add_option("--temperature", a.options.temperature,
                     "0 (default): greedy; above 0: sample from softmax(logits / T)");
      app.add_option("--top-k", a.options.top_k, "Sample from the k most likely tokens (0: all)");
      app.add_option("--top-p", a.options.top_p,
                     "Sample from the most likely tokens holding this probability mass (1: all)");
      app.add_option("--seed", a.options.seed, "Sampling seed (default 0)");
      app.add_option("--stop", a.stop,
                     "Stop a prompt at this token: a special token's text or one-token text "
                     "(repeatable)");
      app.add_option("--stop-id", a.stop_ids, "Stop a prompt at this token id (repeatable)");
      app.add_flag("--ignore-eot", a.ignore_eot,
                   "Do not stop at the tokenizer's end-of-text token (stopping is the default)");
      app.add_option("--batch-size", a.options.batch_size, "Prompts decoded together (default 8)");
      app.add_flag("--no-kv-cache", a.no_cache,
                   "Run the whole sequence through the model for every new token");
      app.add_option("--tp", a.tp, "Tensor-parallel size (default 1); prompts split over dp");
      app.add_flag("--json", a.json,
                   "One JSON line per prompt: prompt, text, tokens, finish_reason");
    },
    run_generate);

}  // namespace
}  // namespace hpctrain::cli
