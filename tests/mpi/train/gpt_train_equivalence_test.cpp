// The whole GPT trained through the real Trainer on every dp x tp grid the world allows gives the
// run of one rank (MPI_COMM_SELF, dp = tp = 1) with the whole global batch: the same loss and
// gradient norm at every step (metrics.jsonl), the same evaluation at the end, and the same final
// logical parameters (tp shards gathered). AdamW with gradient clipping that fires, so the global
// gradient norm over tp shards and replicated parameters is checked too. Two shapes: tied
// embeddings with a vocabulary tp divides, and an untied head with a padded vocabulary (251).

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/parallel/tensor_parallel_shard.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {
namespace {

constexpr std::int64_t kSeqLen = 16;
constexpr std::int64_t kBatchPerRank = 2;
constexpr std::int64_t kSteps = 5;

const runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

// Byte-level "text": sentences of words drawn from a small list, so the loss has something to
// learn in a few steps. All ids are below 251, the padded shape's vocabulary.
std::vector<std::uint16_t> synthetic_text(std::int64_t length, std::uint64_t seed) {
  static const char* kWords[] = {"the",   "cat", "sat", "on", "a",     "mat",   "and",
                                 "ranks", "sum", "all", "of", "their", "grads", "."};
  constexpr std::int64_t kCount = sizeof(kWords) / sizeof(kWords[0]);
  auto gen = at::detail::createCPUGenerator(seed);
  auto picks = torch::randint(0, kCount, {length}, gen, torch::kLong);
  std::vector<std::uint16_t> tokens;
  for (std::int64_t i = 0; static_cast<std::int64_t>(tokens.size()) < length; ++i) {
    for (const char* c = kWords[picks[i].item<std::int64_t>()]; *c; ++c) {
      tokens.push_back(static_cast<std::uint8_t>(*c));
    }
    tokens.push_back(' ');
  }
  tokens.resize(static_cast<std::size_t>(length));
  return tokens;
}

std::string dataset_dir() {
  static std::string dir = [] {
    int token = 0;
    if (rt().world_rank() == 0) token = static_cast<int>(getpid());
    MPI_Bcast(&token, 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::string d = str("/tmp/hpctrain-gpt-train-test-", token);
    if (rt().world_rank() == 0) {
      std::filesystem::create_directories(d);
      data::Provenance prov{"synthetic words", "gpt_train_equivalence_test"};
      data::write_token_file(d + "/train.h5", synthetic_text(96 * kSeqLen + 1, 3), 251, "bytes",
                             prov);
      data::write_token_file(d + "/val.h5", synthetic_text(13 * kSeqLen + 1, 4), 251, "bytes",
                             prov);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

struct Shape {
  const char* name;
  const char* model_yaml;
};

const Shape kTied{"tied256",
                  "{name: gpt, vocab_size: 256, seq_len: 16, layers: 2, heads: 4, width: 32}"};
const Shape kUntiedPadded{"untied251",
                          "{name: gpt, vocab_size: 251, seq_len: 16, layers: 2, heads: 4, "
                          "width: 32, mlp_ratio: 2, tied_embeddings: false}"};

Config make_config(const Shape& shape, const std::string& run_dir) {
  Config c = Config::parse(
      str("run: {seed: 17, epochs: 1, max_steps: ", kSteps,
          "}\n"
          "model: ",
          shape.model_yaml,
          "\n"
          "data: {shuffle: true, prefetch: 2}\n"
          // grad_clip below the initial gradient norm (~1): clipping fires at every step.
          "optim: {name: adamw, lr: 0.003, weight_decay: 0.1, grad_clip: 0.25}\n"
          "schedule: {name: cosine, warmup_steps: 2}\n"
          "eval: {at_end: true, batch_size: 5}\n"
          "logging: {every_steps: 1, progress: off}\n"),
      "<test>");
  c.set("data.train=" + dataset_dir() + "/train.h5");
  c.set("data.val=" + dataset_dir() + "/val.h5");
  c.set("run.dir=" + run_dir);
  return c;
}

// The logical parameters (tp shards gathered) of a run, by name. Only world rank 0 writes
// metrics.jsonl, so the curve comes from run_dir on that rank.
using Params = std::vector<std::pair<std::string, torch::Tensor>>;

Params train_on(MPI_Comm base, int tp, Config config, const std::string& what) {
  runtime::ProcessGrid grid(rt(), tp, base);
  runtime::DeviceBinding cpu;
  auto comms = comm::make_group_communicators(rt(), grid, cpu, "mpi");
  Trainer trainer(config, "unused", comm::Environment{rt(), grid, cpu, comms}, "none");
  trainer.run();
  // A model built like the trainer's gives each parameter's shard; its own weights are unused.
  auto section = config.section("model");
  auto shapes = model::build_model(
      section, model::ModelContext{comms.tp, grid.tp_rank(), grid.tp_size(), 17, {}});
  Params logical;
  for (auto& [name, local] : trainer.local_parameters()) {
    const model::ShardInfo info = shapes->shard_info(name);
    if (info.split_dim < 0 && tp > 1) {
      // Replicated within the tp group: every tp rank must hold the same bits.
      auto all = comms.tp->all_gather(local.contiguous().unsqueeze(0));
      for (int r = 0; r < tp; ++r) {
        EXPECT_TRUE(torch::equal(all[r], local))
            << what << ": replicated " << name << " differs on tp rank " << r;
      }
    }
    logical.emplace_back(
        name, parallel::gather_logical(
                  local, parallel::TensorShard{info.logical_shape, info.split_dim}, comms.tp));
  }
  return logical;
}

std::vector<nlohmann::json> read_records(const std::string& path, const std::string& type) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(j);
  }
  return out;
}

struct Case {
  const Shape* shape;
  int tp;
  int accumulation;
  const char* shard = "none";  // parallel.shard of the distributed run; the reference is unsharded
  const char* recompute = "none";
};

void check_case(const Case& c) {
  const int world = rt().world_size();
  const int dp = world / c.tp;
  const std::string what =
      str(c.shape->name, " dp=", dp, " tp=", c.tp, " accumulation=", c.accumulation,
          " shard=", c.shard, " recompute=", c.recompute);
  const std::string tag =
      str(c.shape->name, "-tp", c.tp, "-acc", c.accumulation, "-shard-", c.shard, "-", c.recompute);

  Config dist = make_config(*c.shape, str(dataset_dir(), "/dist-", tag));
  dist.set(str("parallel.tp=", c.tp));
  dist.set(str("data.batch_size=", kBatchPerRank));
  dist.set(str("optim.grad_accumulation=", c.accumulation));
  dist.set(str("parallel.shard=", c.shard));
  dist.set(str("model.recompute=", c.recompute));
  Params distributed = train_on(MPI_COMM_WORLD, c.tp, dist, what);

  Config ref = make_config(*c.shape, str(dataset_dir(), "/ref-", tag, "-rank", rt().world_rank()));
  ref.set(str("data.batch_size=", kBatchPerRank * dp * c.accumulation));
  Params reference = train_on(MPI_COMM_SELF, 1, ref, what + " reference");

  // Parameters: float32 sums in another order, amplified a little by Adam's normalisation. (Losses
  // and gradient norms below agree to ~1e-7 in practice; the tolerances leave room for BLAS.)
  ASSERT_EQ(distributed.size(), reference.size()) << what;
  for (std::size_t i = 0; i < distributed.size(); ++i) {
    ASSERT_EQ(distributed[i].first, reference[i].first) << what;
    ASSERT_EQ(distributed[i].second.sizes(), reference[i].second.sizes())
        << what << " " << distributed[i].first;
    const double diff = (distributed[i].second - reference[i].second).abs().max().item<double>();
    EXPECT_LT(diff, 1e-4) << what << ": " << distributed[i].first << " differs by " << diff;
  }

  if (rt().world_rank() != 0) return;
  auto curve = read_records(str(dataset_dir(), "/dist-", tag, "/metrics.jsonl"), "train");
  auto ref_curve = read_records(str(dataset_dir(), "/ref-", tag, "-rank0/metrics.jsonl"), "train");
  ASSERT_EQ(curve.size(), static_cast<std::size_t>(kSteps)) << what;
  ASSERT_EQ(ref_curve.size(), static_cast<std::size_t>(kSteps)) << what;
  for (std::size_t s = 0; s < curve.size(); ++s) {
    EXPECT_EQ(curve[s]["step"], ref_curve[s]["step"]);
    EXPECT_NEAR(curve[s]["loss"].get<double>(), ref_curve[s]["loss"].get<double>(), 1e-5)
        << what << " step " << s + 1;
    EXPECT_NEAR(curve[s]["grad_norm"].get<double>(), ref_curve[s]["grad_norm"].get<double>(),
                1e-5 * ref_curve[s]["grad_norm"].get<double>())
        << what << " step " << s + 1;
    // Top-1 may flip on a near tie: allow one token of the step's global batch.
    EXPECT_NEAR(curve[s]["accuracy"].get<double>(), ref_curve[s]["accuracy"].get<double>(),
                1.01 / static_cast<double>(kBatchPerRank * dp * c.accumulation * kSeqLen))
        << what << " step " << s + 1;
  }
  // The clipping threshold really was exceeded, and the model learned something.
  EXPECT_GT(ref_curve.front()["grad_norm"].get<double>(), 0.25) << what;
  EXPECT_LT(ref_curve.back()["loss"].get<double>(), ref_curve.front()["loss"].get<double>())
      << what;

  auto eval = read_records(str(dataset_dir(), "/dist-", tag, "/metrics.jsonl"), "eval");
  auto ref_eval = read_records(str(dataset_dir(), "/ref-", tag, "-rank0/metrics.jsonl"), "eval");
  ASSERT_EQ(eval.size(), 1u) << what;
  ASSERT_EQ(ref_eval.size(), 1u) << what;
  EXPECT_EQ(eval[0]["samples"], 13) << what;
  EXPECT_NEAR(eval[0]["loss"].get<double>(), ref_eval[0]["loss"].get<double>(), 1e-5) << what;
  EXPECT_NEAR(eval[0]["perplexity"].get<double>(), ref_eval[0]["perplexity"].get<double>(),
              1e-5 * ref_eval[0]["perplexity"].get<double>())
      << what;
  EXPECT_NEAR(eval[0]["accuracy"].get<double>(), ref_eval[0]["accuracy"].get<double>(),
              1.01 / (13 * kSeqLen))
      << what;
}

// Removes the run directories once every rank is done with them.
class CleanUp : public ::testing::Environment {
 public:
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rt().world_rank() == 0) std::filesystem::remove_all(dataset_dir());
  }
};
[[maybe_unused]] const auto* const kCleanUp = ::testing::AddGlobalTestEnvironment(new CleanUp);

// Every tp among 1, 2, 4 that divides the world (dp = world / tp).
std::vector<int> tp_sizes() {
  std::vector<int> out;
  for (int tp : {1, 2, 4}) {
    if (rt().world_size() % tp == 0) out.push_back(tp);
  }
  return out;
}

TEST(GptTrainEquivalence, TiedEmbeddingsAtEveryGridMatchOneRank) {
  for (int tp : tp_sizes()) check_case({&kTied, tp, 1});
}

TEST(GptTrainEquivalence, UntiedPaddedVocabularyAtEveryGridMatchesOneRank) {
  for (int tp : tp_sizes()) check_case({&kUntiedPadded, tp, 1});
}

// Sharded optimizer state over each tp rank's dp group (dp = 2 x tp = 2 at four ranks) and
// activation recomputation, against the unsharded one-rank reference; clipping fires (above).
TEST(GptTrainEquivalence, ShardedOptimizerWithRecomputationAtEveryGrid) {
  for (int tp : tp_sizes()) check_case({&kTied, tp, 1, "optimizer", "block"});
  check_case({&kUntiedPadded, rt().world_size() % 2 == 0 ? 2 : 1, 2, "optimizer", "attention"});
}

// Sharded gradients and fully sharded parameters (parallel.shard: gradients, full) over each tp
// rank's dp group (dp = 2 x tp = 2 at four ranks), with recomputation and accumulation, and the
// periodic evaluation of a fully sharded model (gathered whole for it), against one rank.
TEST(GptTrainEquivalence, GradientAndFullShardingAtEveryGrid) {
  for (int tp : tp_sizes()) check_case({&kTied, tp, 1, "full", "block"});
  const int tp = rt().world_size() % 2 == 0 ? 2 : 1;
  check_case({&kUntiedPadded, tp, 2, "full"});
  check_case({&kTied, tp, 2, "gradients", "attention"});
}

TEST(GptTrainEquivalence, GradientAccumulationWithTensorParallelism) {
  check_case({&kTied, rt().world_size() % 2 == 0 ? 2 : 1, 2});
}

}  // namespace
}  // namespace hpctrain::train
