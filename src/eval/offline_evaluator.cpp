#include "hpctrain/eval/offline_evaluator.hpp"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "checkpoint_triage.hpp"
#include "hpctrain/build_config.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/comm/startup_agreement.hpp"
#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/data/dataset.hpp"
#include "hpctrain/data/multiple_choice.hpp"
#include "hpctrain/data/tokenizer.hpp"
#include "hpctrain/eval/batch_size_search.hpp"
#include "hpctrain/eval/compression.hpp"
#include "hpctrain/eval/evaluator.hpp"
#include "hpctrain/eval/model_setup.hpp"
#include "hpctrain/eval/multiple_choice.hpp"
#include "hpctrain/eval/result_store.hpp"
#include "hpctrain/eval/run_config.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/agreed_error.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/regular_file.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/tensorboard_writer.hpp"
#include "result_table.hpp"

namespace hpctrain::eval {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using detail::CheckpointDecision;

namespace {

std::string absolute(const std::string& path) {
  std::error_code ec;
  auto p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? path : p.string();
}

// The run a checkpoint directory belongs to: <run_dir>/checkpoints/step_<N>.
std::string run_dir_of_checkpoint(const std::string& dir) {
  const fs::path parent = fs::path(absolute(dir)).parent_path();
  return parent.filename() == "checkpoints" ? parent.parent_path().string() : std::string();
}

}  // namespace

// How one checkpoint ended: evaluated now, had a result, vanished, or does not verify.
enum class Outcome { kEvaluated, kDone, kGone, kBad };

// What a checkpoint's evaluation reads before its weights: the run's config, data and model.
struct Loaded {
  std::optional<RunConfig> config;
  data::Dataset* data = nullptr;
  model::Model* model = nullptr;
  std::vector<std::vector<data::ChoiceExample>> task_examples;  // eval.tasks of the run
  bool compressed_checkpoint = false;
  bool compress_now = false;
};

struct OfflineEvaluator::Impl {
  comm::Environment env;
  OfflineOptions options;
  std::unique_ptr<comm::ControlPlane> decisions;  // rank 0's decisions travel here
  detail::CheckpointTriage triage;
  torch::Device device{torch::kCPU};
  std::map<std::string, std::unique_ptr<checkpoint::CheckpointManager>> managers;  // by run dir
  std::map<std::string, std::unique_ptr<data::Dataset>> datasets;                  // by path
  std::map<std::string, std::shared_ptr<model::Model>> models;  // by model section text
  std::map<std::string, BatchSearchResult> searches;            // by model, data, precision
  std::vector<nlohmann::json> session;  // results written by this command (rank 0)
  EvalKey last_key;
  std::string last_store;

  Impl(comm::Environment e, OfflineOptions o)
      : env(std::move(e)), options(std::move(o)), triage(options) {}
  bool is_rank0() const { return env.runtime.world_rank() == 0; }
  std::string decide(const std::string& text) { return decisions->broadcast_idle(text); }
  ResultStore store_for(const std::string& run_dir) const {
    return ResultStore(options.results_dir.empty() ? run_dir + "/eval" : options.results_dir);
  }
  checkpoint::CheckpointManager& manager(const std::string& run_dir);
  data::Dataset& dataset(const CheckpointDecision& decision, const RunConfig& config);
  model::Model& model_for(RunConfig& config);
  std::int64_t batch_size(const CheckpointDecision& decision, model::Model& model,
                          data::Dataset& data, const std::string& model_text,
                          nlohmann::ordered_json& record);
  Outcome run_one(const std::string& run_dir, const std::string& dir, bool strict);
  // run_one's parts, in its order; each is Collective over the world, as run_one is.
  /// A verdict that ends the checkpoint's turn before any evaluation (an error is thrown).
  std::optional<Outcome> settled(const CheckpointDecision& decision, const std::string& dir,
                                 bool strict);
  /// The stored config, its data and model, the run's eval.tasks read; errors agreed on.
  Loaded load_inputs(const CheckpointDecision& decision);
  /// Loads the checkpoint into `records`; an outcome when it vanished or fails (not strict).
  std::optional<Outcome> load_weights(const std::string& run_dir, const std::string& dir,
                                      std::vector<checkpoint::TensorRecord>& records, bool strict);
  /// The float32 baseline of a compressed evaluation, the model compressed; the report so far.
  nlohmann::ordered_json compress(const std::string& run_dir, const std::string& dir,
                                  const CheckpointDecision& decision, Loaded& in,
                                  std::vector<checkpoint::TensorRecord>& records,
                                  std::map<std::string, model::Int8Weight>& int8,
                                  const EvalOptions& eval_options,
                                  std::optional<EvalResult>& baseline);
  /// --compare-fp32: the bf16 result against an fp32 evaluation of the same model.
  nlohmann::ordered_json compare_fp32(Loaded& in, const EvalOptions& eval_options,
                                      const EvalResult& result);
  /// The run's eval.tasks scored, as its periodic evaluation records them.
  nlohmann::ordered_json score_tasks(const CheckpointDecision& decision, Loaded& in);
  /// run_one's evaluation for --task multiple-choice (after the decision). Collective.
  Outcome run_choice(const std::string& run_dir, const CheckpointDecision& decision,
                     ResultStore& store);
  /// World rank 0 writes `record` (metric `metric`) into `store` and logs `line`; any problem is
  /// agreed on and thrown on every rank. Collective.
  void commit(ResultStore& store, const CheckpointDecision& decision,
              const nlohmann::ordered_json& record, const std::string& metric,
              const std::function<void(const nlohmann::json& best)>& log_lines);
  /// Rank 0: a run trained with logging.tensorboard (it has RUN_DIR/tensorboard) gets the result
  /// as "offline_eval[/<tag>]/<field>" scalars at the checkpoint's step. Local.
  void tensorboard(const std::string& run_dir, const EvalKey& key, const EvalResult& result);
  std::map<std::string, std::unique_ptr<runtime::TensorBoardWriter>> tensorboards;  // by run dir
  nlohmann::ordered_json record_of(const CheckpointDecision& decision, const EvalResult& result,
                                   std::int64_t batch, const std::string& metric);
  /// The fields every result record opens with: the checkpoint, its data, the grid and the
  /// batch. Local.
  nlohmann::ordered_json record_head(const CheckpointDecision& decision, std::int64_t batch,
                                     const std::string& precision) const;
  int evaluate_dirs(const std::string& run_dir, const std::vector<std::string>& dirs,
                    int& evaluated, int& done, std::vector<std::string>& bad);
  void print_table();
};

checkpoint::CheckpointManager& OfflineEvaluator::Impl::manager(const std::string& run_dir) {
  auto& m = managers[run_dir];
  if (!m) {
    m = std::make_unique<checkpoint::CheckpointManager>(run_dir, env.grid,
                                                        checkpoint::ManagerOptions{});
  }
  return *m;
}

data::Dataset& OfflineEvaluator::Impl::dataset(const CheckpointDecision& decision,
                                               const RunConfig& config) {
  auto& d = datasets[decision.data_path];
  if (!d) {
    data::DatasetExpectation expect;
    expect.seq_len = config.model().seq_len;
    expect.vocab_size = config.model().vocab_size;
    expect.config_key = decision.data_key;
    d = data::Dataset::open(decision.data_path, expect, config.data().read_options());
  }
  return *d;
}

model::Model& OfflineEvaluator::Impl::model_for(RunConfig& config) {
  auto& m = models[config.model_text()];
  if (!m) {
    const auto& grid = env.grid;
    // The weights come from the checkpoint; the seed only makes the throwaway init repeatable.
    model::ModelContext ctx{env.comms.tp, grid.tp_rank(), grid.tp_size(), 0, {}};
    torch::manual_seed(0);
    m = config.build_model(ctx);
    m->to(device);
    m->eval();
  }
  return *m;
}

std::int64_t OfflineEvaluator::Impl::batch_size(const CheckpointDecision& decision,
                                                model::Model& model, data::Dataset& data,
                                                const std::string& model_text,
                                                nlohmann::ordered_json& record) {
  if (decision.key.batch_size != "auto") return std::stoll(decision.key.batch_size);
  const std::string cache_key = str(model_text, "|", decision.data_path, "|",
                                    decision.key.precision, "|", decision.key.max_samples);
  auto it = searches.find(cache_key);
  if (it == searches.end()) {
    BatchSearchOptions o;
    const std::int64_t n = data.info().num_samples;
    o.samples = decision.key.max_samples > 0 ? std::min(n, decision.key.max_samples) : n;
    o.memory_budget = options.memory_budget > 0 ? options.memory_budget
                                                : default_memory_budget(env.runtime.local_size());
    o.precision = decision.precision;
    log::info(str("--batch-size auto: trying powers of two on ", env.grid.describe(),
                  o.memory_budget > 0 && !device.is_cuda()
                      ? str(", memory budget ", format_bytes(static_cast<double>(o.memory_budget)),
                            " per rank")
                      : std::string()));
    BatchSearchResult r = search_batch_size(model, data, *env.control.dp, *env.control.world, o);
    log::info(str("batch sizes tried (samples/s predicted for the whole evaluation):\n",
                  format_trials(r), "\n  chosen: ", r.chosen));
    it = searches.emplace(cache_key, std::move(r)).first;
  }
  nlohmann::json trials = nlohmann::json::array();
  for (const auto& t : it->second.trials) {
    trials.push_back({{"batch", t.batch},
                      {"batch_seconds", t.batch_seconds},
                      {"samples_per_s", t.samples_per_second},
                      {"memory_bytes", t.memory_bytes}});
  }
  record["batch_search"] = {{"tried", trials}, {"stopped", it->second.stop_reason}};
  return it->second.chosen;
}

nlohmann::ordered_json OfflineEvaluator::Impl::record_head(const CheckpointDecision& decision,
                                                           std::int64_t batch,
                                                           const std::string& precision) const {
  const auto& grid = env.grid;
  return {{"checkpoint", absolute(decision.dir)},
          {"step", decision.step},
          {"epoch", decision.epoch},
          {"split", decision.key.split},
          {"data", absolute(decision.data_path)},
          {"data_xxh3", decision.key.data_xxh3},
          {"data_bytes", decision.data_bytes},
          {"world_size", grid.world_size()},
          {"grid", {{"dp", grid.dp_size()}, {"tp", grid.tp_size()}}},
          {"device", env.device.device},
          {"threads", env.device.threads},
          {"batch_size", batch},
          {"batch_size_requested", decision.key.batch_size},
          {"max_samples", decision.key.max_samples},
          {"precision", precision}};
}

namespace {

// The fields every result record closes with: its metric, config, version and time.
void stamp_record(nlohmann::ordered_json& record, const CheckpointDecision& decision,
                  const std::string& metric) {
  record["metric"] = metric;
  record["config"] = absolute(decision.config_origin);
  record["hpctrain_version"] = HPCTRAIN_VERSION;
  record["created_at"] = utc_timestamp();
}

}  // namespace

nlohmann::ordered_json OfflineEvaluator::Impl::record_of(const CheckpointDecision& decision,
                                                         const EvalResult& r, std::int64_t batch,
                                                         const std::string& metric) {
  nlohmann::ordered_json j = record_head(decision, batch, decision.key.precision);
  add_result_fields(j, r);
  stamp_record(j, decision, metric);
  return j;
}

namespace {

// The outputs of an evaluation in PyTorch's format (torch::pickle_save of one tensor), written
// beside the target and renamed.
void save_outputs(const std::string& path, const std::vector<torch::Tensor>& batches) {
  const torch::Tensor all = batches.empty() ? torch::empty({0}) : torch::cat(batches);
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(all));
  const std::string tmp = path + ".tmp";
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    fs::remove(tmp);
    throw ConfigError(str("cannot write ", tmp, ": check --save-outputs and free space"));
  }
  fs::rename(tmp, path);
  log::info(str("wrote the outputs ", all.sizes(), " of the evaluated samples to ", path,
                " (torch.load returns the tensor)"));
}

}  // namespace

std::optional<Outcome> OfflineEvaluator::Impl::settled(const CheckpointDecision& decision,
                                                       const std::string& dir, bool strict) {
  // Decided on rank 0 and broadcast: every rank raises it, world rank 0 prints it (one message).
  if (decision.verdict == detail::Verdict::kError)
    throw AgreedError(decision.message, decision.code);
  if (decision.verdict == detail::Verdict::kGone || decision.verdict == detail::Verdict::kBad) {
    if (strict) throw AgreedCheckpointError(decision.message);
    if (decision.verdict == detail::Verdict::kGone) {
      log::warn(str("skipped ", dir,
                    ": it was deleted (checkpoint retention) before it could be "
                    "evaluated"));
      return Outcome::kGone;
    }
    log::warn(str("skipped: ", decision.message));
    return Outcome::kBad;
  }
  return std::nullopt;
}

Loaded OfflineEvaluator::Impl::load_inputs(const CheckpointDecision& decision) {
  // Every rank: the same config text, so the same model, data and errors everywhere; an error
  // is agreed on and printed once (comm/startup_agreement.hpp).
  Loaded in;
  in.compressed_checkpoint = !decision.compression.is_null();
  in.compress_now = options.compression.any();
  comm::StartupAgreement(*env.control.world).run([&] {
    in.config.emplace(decision.config_text, decision.config_origin);
    in.data = &dataset(decision, *in.config);
    in.model = &model_for(*in.config);
    in.model->clear_int8_linears();  // a cached model may run a previous checkpoint's int8 layers
    check_data_fits_model(*in.model, *in.data, decision.data_key, in.config->model().vocab_size);
    if ((in.compressed_checkpoint || in.compress_now) && env.grid.tp_size() > 1) {
      throw ConfigError(
          str("compressed evaluation runs on the whole logical model: use --tp 1 (a "
              "tensor-parallel checkpoint is gathered to its logical tensors)"));
    }
    const auto& tasks = in.config->eval_tasks();
    if (!tasks.empty() && !in.compressed_checkpoint && !in.compress_now) {
      const auto tokenizer = data::load_tokenizer(in.config->data().tokenizer);
      for (std::size_t i = 0; i < tasks.size(); ++i) {
        in.task_examples.push_back(data::read_multiple_choice(
            tasks[i].path, *tokenizer,
            str("eval.tasks[", i, "].path (", decision.config_origin, ")")));
      }
    }
  });
  return in;
}

std::optional<Outcome> OfflineEvaluator::Impl::load_weights(
    const std::string& run_dir, const std::string& dir,
    std::vector<checkpoint::TensorRecord>& records, bool strict) {
  try {
    manager(run_dir).load(dir, records);
  } catch (const CheckpointError& e) {
    if (strict) throw;
    // Retention may delete a checkpoint between the listing and the load.
    const std::string gone = decide(is_rank0() ? (fs::is_directory(dir) ? "no" : "yes") : "");
    if (gone == "yes") {
      log::warn(str("skipped ", dir, ": it was deleted (checkpoint retention) while loading"));
      return Outcome::kGone;
    }
    log::warn(str("skipped: ", e.what()));
    return Outcome::kBad;
  }
  return std::nullopt;
}

nlohmann::ordered_json OfflineEvaluator::Impl::compress(
    const std::string& run_dir, const std::string& dir, const CheckpointDecision& decision,
    Loaded& in, std::vector<checkpoint::TensorRecord>& records,
    std::map<std::string, model::Int8Weight>& int8, const EvalOptions& eval_options,
    std::optional<EvalResult>& baseline) {
  // Compressed evaluation: the float32 model first (the source checkpoint, or this one before
  // compressing it in memory), then the compressed one, on the same data and batches.
  model::Model& model = *in.model;
  nlohmann::ordered_json compression;
  if (in.compressed_checkpoint) {
    compression = decision.compression;
    if (!decision.baseline_dir.empty()) {
      auto float_records = model_records(model);
      manager(run_dir).load(decision.baseline_dir, float_records);
      baseline = evaluate(model, *in.data, *env.control.dp, eval_options);
      manager(run_dir).load(dir, records);
    } else {
      log::warn(str(dir, ": ", decision.baseline_note));
    }
    install_int8(model, int8);
  } else if (in.compress_now) {
    baseline = evaluate(model, *in.data, *env.control.dp, eval_options);
    CompressedModel compressed = compress_model(model, options.compression);
    compression = compressed.report;
    compression["source"] = absolute(dir);
  }
  return compression;
}

nlohmann::ordered_json OfflineEvaluator::Impl::compare_fp32(Loaded& in,
                                                            const EvalOptions& eval_options,
                                                            const EvalResult& result) {
  EvalOptions fp32 = eval_options;
  fp32.precision = Precision::kFp32;
  const EvalResult ref = evaluate(*in.model, *in.data, *env.control.dp, fp32);
  nlohmann::ordered_json cmp{{"fp32_loss", ref.loss},
                             {"fp32_accuracy", ref.accuracy},
                             {"loss_diff", result.loss - ref.loss},
                             {"accuracy_diff", result.accuracy - ref.accuracy}};
  if (ref.task == Task::kLanguageModel) {
    cmp["fp32_perplexity"] = ref.perplexity;
    cmp["perplexity_diff"] = result.perplexity - ref.perplexity;
  }
  cmp["fp32_samples_per_s"] = ref.samples_per_second;
  return cmp;
}

nlohmann::ordered_json OfflineEvaluator::Impl::score_tasks(const CheckpointDecision& decision,
                                                           Loaded& in) {
  nlohmann::ordered_json tasks = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < in.task_examples.size(); ++i) {
    const EvalTask& t = in.config->eval_tasks()[i];
    const ChoiceResult r = evaluate_multiple_choice(*in.model, in.task_examples[i], *env.control.dp,
                                                    ChoiceOptions{t.batch_size, t.max_examples});
    tasks[t.name] = choice_json(r);
    log::info(str("eval step ", decision.step, " task ", t.name, ": ", choice_text(r)));
  }
  return tasks;
}

Outcome OfflineEvaluator::Impl::run_one(const std::string& run_dir, const std::string& dir,
                                        bool strict) {
  ResultStore store = store_for(run_dir);
  std::string text;
  if (is_rank0()) {
    text = triage.decide(run_dir, dir, store)
               .to_json()
               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  const CheckpointDecision decision =
      CheckpointDecision::from_json(nlohmann::json::parse(decide(text)));
  if (const auto outcome = settled(decision, dir, strict)) return *outcome;
  last_key = decision.key;
  last_store = store.dir();
  if (decision.verdict == detail::Verdict::kDone) {
    log::info(str("step ", decision.step, ": already evaluated (", decision.result_file, ")"));
    return Outcome::kDone;
  }

  if (!options.choice_file.empty()) return run_choice(run_dir, decision, store);
  Loaded in = load_inputs(decision);
  RunConfig& config = *in.config;
  data::Dataset& data = *in.data;
  model::Model& model = *in.model;
  std::map<std::string, model::Int8Weight> int8;
  auto records = in.compressed_checkpoint ? compressed_records(model, decision.compression, int8)
                                          : model_records(model);
  if (const auto outcome = load_weights(run_dir, dir, records, strict)) return *outcome;

  const std::string metric = metric_name(config.eval().metric_for(model.task()));
  nlohmann::ordered_json extra;
  EvalOptions eval_options;
  eval_options.batch_size = batch_size(decision, model, data, config.model_text(), extra);
  eval_options.max_samples = decision.key.max_samples;
  eval_options.precision = decision.precision;  // fp16: CUDA only, float32 on CPU
  if (config.tf32()) compat::set_tf32({*config.tf32(), *config.tf32()});
  eval_options.prefetch = options.prefetch;
  std::optional<EvalResult> baseline;
  nlohmann::ordered_json compression =
      compress(run_dir, dir, decision, in, records, int8, eval_options, baseline);
  std::vector<torch::Tensor> outputs;
  if (!options.save_outputs.empty()) {
    eval_options.on_outputs = [&outputs](std::int64_t, const torch::Tensor& batch) {
      outputs.push_back(batch.detach().to(torch::kCPU, torch::kFloat32).clone());
    };
  }
  const EvalResult result = evaluate(model, data, *env.control.dp, eval_options);
  if (!options.save_outputs.empty()) save_outputs(options.save_outputs, outputs);
  nlohmann::ordered_json record = record_of(decision, result, eval_options.batch_size, metric);
  std::string compression_warning;
  if (in.compressed_checkpoint || in.compress_now) {
    if (baseline) {
      compression["float32"] =
          compare_with_float32(result, *baseline, options.max_drop, compression_warning);
      compression["float32"]["checkpoint"] = absolute(decision.baseline_dir);
    }
    record["compression"] = compression;
  }
  if (eval_options.precision == Precision::kBf16 && options.compare_fp32) {
    record["bf16_vs_fp32"] = compare_fp32(in, eval_options, result);
  }
  record["cost"] = detail::cost_record(decision.training_cost, model.forward_flops_per_sample(),
                                       decision.consumed_samples, result.seconds,
                                       env.grid.world_size(), result.samples);
  for (auto& [k, v] : extra.items()) record[k] = v;
  if (!in.task_examples.empty()) record["tasks"] = score_tasks(decision, in);
  record["key"] = decision.key.to_json();

  commit(store, decision, record, metric, [&](const nlohmann::json& best) {
    log::info(detail::result_line(record, store.step_file(decision.key), best));
    log::info(detail::cost_line(record.at("cost")));
    if (record.contains("compression")) log::info(compression_line(record.at("compression")));
    if (!compression_warning.empty()) log::warn(compression_warning);
    tensorboard(run_dir, decision.key, result);
  });
  return Outcome::kEvaluated;
}

void OfflineEvaluator::Impl::commit(
    ResultStore& store, const CheckpointDecision& decision, const nlohmann::ordered_json& record,
    const std::string& metric, const std::function<void(const nlohmann::json& best)>& log_lines) {
  nlohmann::json problem;  // null: the result was written
  if (is_rank0()) {
    try {
      const nlohmann::json best =
          store.write(decision.key, record, metric, EvalResult::higher_is_better(metric));
      session.push_back(record);
      log_lines(best);
    } catch (const Error& e) {
      // Its exit code travels with it: a FIFO in the results directory is exit 2, like the
      // other files in the way.
      problem = {{"message", e.what()}, {"code", e.exit_code()}};
    }
  }
  problem = nlohmann::json::parse(decide(problem.dump()));
  if (problem.is_object()) {
    throw AgreedError(problem.at("message").get<std::string>(), problem.at("code").get<int>());
  }
}

Outcome OfflineEvaluator::Impl::run_choice(const std::string& run_dir,
                                           const CheckpointDecision& decision, ResultStore& store) {
  std::optional<RunConfig> stored;
  model::Model* built = nullptr;
  std::vector<data::ChoiceExample> examples;
  comm::StartupAgreement(*env.control.world).run([&] {
    stored.emplace(decision.config_text, decision.config_origin);
    built = &model_for(*stored);
    built->clear_int8_linears();
    if (built->task() != Task::kLanguageModel) {
      throw ConfigError(str("--task multiple-choice scores language models; ", decision.dir,
                            " holds a ", task_name(built->task()), " model"));
    }
    if (options.compression.any()) {
      throw ConfigError(
          "--task multiple-choice evaluates the float32 model: drop --quantize/--prune");
    }
    const auto tokenizer = data::load_tokenizer(stored->data().tokenizer);
    examples = data::read_multiple_choice(decision.data_path, *tokenizer, decision.data_key);
  });
  auto records = model_records(*built);
  manager(run_dir).load(decision.dir, records);
  ChoiceOptions o;
  o.batch_size = std::stoll(decision.key.batch_size);
  o.max_examples = decision.key.max_samples;
  const ChoiceResult r = evaluate_multiple_choice(*built, examples, *env.control.dp, o);
  nlohmann::ordered_json record = record_head(decision, o.batch_size, "fp32");
  record["task"] = "multiple_choice";
  record["samples"] = r.examples;
  record["eval_seconds"] = r.seconds;
  record["samples_per_s"] = r.examples_per_second;
  const nlohmann::ordered_json fields = choice_json(r);
  for (const auto& [k, v] : fields.items()) record[k] = v;
  // Each example's chosen ending (by sum, by sum per token): the choices behind the accuracy.
  record["chosen"] = r.chosen;
  record["chosen_norm"] = r.chosen_norm;
  stamp_record(record, decision, "accuracy");
  record["key"] = decision.key.to_json();
  commit(store, decision, record, "accuracy", [&](const nlohmann::json& best) {
    log::info(str("eval step ", decision.step, " (multiple choice, ", decision.data_path,
                  "): ", choice_text(r), " in ", format_seconds(r.seconds), " (",
                  static_cast<std::int64_t>(r.examples_per_second), " examples/s, batch ",
                  o.batch_size, ") -> ", store.step_file(decision.key),
                  best.is_null()
                      ? std::string()
                      : str("; best accuracy so far: step ", best.at("step").get<std::int64_t>())));
  });
  return Outcome::kEvaluated;
}

void OfflineEvaluator::Impl::tensorboard(const std::string& run_dir, const EvalKey& key,
                                         const EvalResult& result) {
  const std::string dir = run_dir + "/tensorboard";
  if (run_dir.empty() || !fs::is_directory(dir)) return;
  auto& writer = tensorboards[run_dir];
  try {
    if (!writer) writer = std::make_unique<runtime::TensorBoardWriter>(dir);
  } catch (const Error& e) {
    log::warn(str("offline results not written for TensorBoard: ", e.what()));
    return;
  }
  const std::string prefix = key.tag.empty() ? "offline_eval/" : "offline_eval/" + key.tag + "/";
  std::vector<std::pair<std::string, double>> values{
      {prefix + "loss", result.loss},
      {prefix + "accuracy", result.accuracy},
      {prefix + "samples_per_s", result.samples_per_second}};
  if (result.task == Task::kLanguageModel)
    values.emplace_back(prefix + "perplexity", result.perplexity);
  if (result.task == Task::kRegression) values.emplace_back(prefix + "mae", result.mae);
  writer->add_scalars(key.step, values);
}

int OfflineEvaluator::Impl::evaluate_dirs(const std::string& run_dir,
                                          const std::vector<std::string>& dirs, int& evaluated,
                                          int& done, std::vector<std::string>& bad) {
  int new_ones = 0;
  for (const std::string& dir : dirs) {
    switch (run_one(run_dir, dir, false)) {
      case Outcome::kEvaluated:
        ++evaluated;
        ++new_ones;
        break;
      case Outcome::kDone: ++done; break;
      case Outcome::kBad: bad.push_back(dir); break;
      case Outcome::kGone: break;
    }
  }
  return new_ones;
}

void OfflineEvaluator::Impl::print_table() {
  if (!is_rank0() || last_store.empty()) return;
  ResultStore store(last_store);
  const auto records = store.family_records(last_key);
  if (records.empty()) return;
  std::set<std::int64_t> now;
  for (const auto& r : session) now.insert(r.at("step").get<std::int64_t>());
  log::info(detail::result_table(records, now, store.dir()));
}

OfflineEvaluator::OfflineEvaluator(comm::Environment env, OfflineOptions options)
    : impl_(std::make_unique<Impl>(std::move(env), std::move(options))) {
  Impl& m = *impl_;
  if (m.env.device.cuda_index >= 0) m.device = torch::Device(torch::kCUDA, m.env.device.cuda_index);
  m.decisions = m.env.control.world->duplicate();
}

OfflineEvaluator::~OfflineEvaluator() = default;

int OfflineEvaluator::evaluate_checkpoint(const std::string& path) {
  Impl& m = *impl_;
  // Rank 0 resolves PATH: a checkpoint directory, or a run directory (its newest that verifies).
  nlohmann::json where;
  if (m.is_rank0()) {
    try {
      runtime::require_readable_directory(path, runtime::FileKind::kCheckpoint, "checkpoint",
                                          "pass a step_<N> directory or a run directory");
      if (fs::is_directory(path + "/checkpoints")) {
        const checkpoint::ResumeChoice choice = checkpoint::choose_resume(path, "auto");
        for (const auto& skipped : choice.skipped) log::warn(str("checkpoint ", skipped));
        if (!choice.path) {
          throw CheckpointError(str("run '", path, "' has no committed checkpoint that verifies"));
        }
        where = {{"run_dir", path}, {"dir", *choice.path}};
      } else if (!fs::is_directory(path)) {
        throw CheckpointError(str("checkpoint '", path,
                                  "' does not exist: pass a step_<N> "
                                  "directory or a run directory"));
      } else {
        std::string run_dir = run_dir_of_checkpoint(path);
        if (run_dir.empty() && m.options.results_dir.empty()) {
          throw ConfigError(str("'", path,
                                "' is not inside a run directory (<run>/checkpoints/"
                                "step_<N>): pass --results DIR for its results"));
        }
        if (run_dir.empty()) run_dir = fs::path(absolute(path)).parent_path().string();
        where = {{"run_dir", run_dir}, {"dir", path}};
      }
    } catch (const Error& e) {
      where = {{"error", e.what()}, {"code", e.exit_code()}};
    }
  }
  where = nlohmann::json::parse(m.decide(where.dump()));
  if (where.contains("error")) {
    throw AgreedError(where.at("error").get<std::string>(), where.at("code").get<int>());
  }
  const std::string run_dir = where.at("run_dir").get<std::string>();
  m.run_one(run_dir, where.at("dir").get<std::string>(), true);
  return kExitOk;
}

int OfflineEvaluator::evaluate_run(const std::string& run_dir) {
  Impl& m = *impl_;
  nlohmann::json listing;
  if (m.is_rank0()) {
    try {
      runtime::require_readable_directory(run_dir, runtime::FileKind::kCheckpoint, "run directory",
                                          "pass the run.dir of a training run");
      auto dirs = checkpoint::list_checkpoints(run_dir);  // newest first
      listing = {{"dirs", std::vector<std::string>(dirs.rbegin(), dirs.rend())}};
    } catch (const Error& e) {
      listing = {{"error", e.what()}, {"code", e.exit_code()}};
    }
  }
  listing = nlohmann::json::parse(m.decide(listing.dump()));
  if (listing.contains("error")) {
    throw AgreedError(listing.at("error").get<std::string>(), listing.at("code").get<int>());
  }
  const auto dirs = listing.at("dirs").get<std::vector<std::string>>();
  if (dirs.empty()) {
    log::info(str("no committed checkpoints in ", checkpoint::checkpoints_dir(run_dir)));
    return kExitOk;
  }
  int evaluated = 0, done = 0;
  std::vector<std::string> bad;
  m.evaluate_dirs(run_dir, dirs, evaluated, done, bad);
  m.print_table();
  log::info(str(evaluated, " checkpoint(s) evaluated, ", done, " already evaluated",
                bad.empty() ? std::string() : str(", ", bad.size(), " did not verify")));
  return bad.empty() ? kExitOk : kExitCheckpoint;
}

int OfflineEvaluator::watch(const std::string& run_dir) {
  Impl& m = *impl_;
  const std::string marker = run_dir + "/training_complete.json";
  log::info(str("watching ", checkpoint::checkpoints_dir(run_dir), " every ",
                format_seconds(m.options.poll_seconds), " until ", marker, " appears (or ",
                format_seconds(m.options.timeout_seconds), " pass without a new checkpoint)"));
  std::set<std::string> seen;  // rank 0: checkpoints handled this session
  auto last_new = Clock::now();
  int evaluated = 0, done = 0;
  std::vector<std::string> bad;
  std::string reason;
  for (bool first = true;; first = false) {
    nlohmann::json poll;
    if (m.is_rank0()) {
      if (!first) {
        std::this_thread::sleep_for(std::chrono::duration<double>(m.options.poll_seconds));
      }
      // The marker is looked at before the listing: the trainer commits its last checkpoint
      // before writing the marker, so a listing after seeing it holds every checkpoint.
      const bool complete = fs::exists(marker);
      std::vector<std::string> pending;
      const auto dirs = checkpoint::list_checkpoints(run_dir);
      for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
        if (seen.insert(*it).second) pending.push_back(*it);
      }
      if (!pending.empty()) last_new = Clock::now();
      const bool timed_out =
          pending.empty() && std::chrono::duration<double>(Clock::now() - last_new).count() >=
                                 m.options.timeout_seconds;
      poll = {{"complete", complete}, {"pending", pending}, {"timed_out", timed_out}};
    }
    poll = nlohmann::json::parse(m.decide(poll.dump()));
    m.evaluate_dirs(run_dir, poll.at("pending").get<std::vector<std::string>>(), evaluated, done,
                    bad);
    if (poll.at("complete").get<bool>()) {
      reason = str("training is complete (", marker, ")");
      break;
    }
    if (poll.at("timed_out").get<bool>()) {
      log::warn(str("no new checkpoint for ", format_seconds(m.options.timeout_seconds),
                    " and no completion marker: stopping the watch (run it again to continue; "
                    "evaluated checkpoints are skipped)"));
      reason = "timeout";
      break;
    }
  }
  m.print_table();
  log::info(str("watch ended: ", reason, "; ", evaluated, " checkpoint(s) evaluated, ", done,
                " already evaluated",
                bad.empty() ? std::string() : str(", ", bad.size(), " did not verify")));
  return bad.empty() ? kExitOk : kExitCheckpoint;
}

}  // namespace hpctrain::eval
