// The llama family trained through the real Trainer on every layout the world allows (dp x tp x
// pp, every parallel.shard mode, recomputation, accumulation) against one rank (MPI_COMM_SELF)
// with the whole global batch, over 20 steps: the loss at every step within 1e-5 (the gradient
// norm within 1e-4 relative), the final evaluation within 1e-5. Two shapes: grouped-query
// attention with Llama-3.1's rope scaling and a tied head (kv_heads 2: split over tp = 2,
// replicated over tp = 4), and a Qwen3-style one (q/k norm, q/k/v bias, head_dim * heads != width,
// kv_heads 1: MQA, replicated at every tp > 1) with an untied head and a vocabulary (251) that tp
// pads.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../../support/mpi_test_util.hpp"
#include "hpctrain/comm/group_communicators.hpp"
#include "hpctrain/data/dataset_writer.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/process_grid.hpp"
#include "hpctrain/runtime/runtime.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/train/trainer.hpp"

namespace hpctrain::train {
namespace {

constexpr std::int64_t kSteps = 20;
constexpr std::int64_t kBatchPerRank = 2;

const runtime::Runtime& rt() {
  return *runtime::Runtime::current();
}

// Tokens with some structure to learn: a random walk over the vocabulary below 251.
std::vector<std::uint16_t> walk(std::int64_t length, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const torch::Tensor steps = torch::randint(-3, 4, {length}, gen, torch::kLong);
  std::vector<std::uint16_t> out;
  std::int64_t at = 100;
  for (std::int64_t i = 0; i < length; ++i) {
    at = (at + steps[i].item<std::int64_t>() + 251) % 251;
    out.push_back(static_cast<std::uint16_t>(at));
  }
  return out;
}

const std::string& data_dir() {
  static const std::string dir = [] {
    const std::string d = testing::shared_temp_dir("llama_layouts");
    if (rt().world_rank() == 0) {
      data::Provenance prov{"random walk", "llama_layouts_test"};
      data::write_token_file(d + "/train.h5", walk(640 * 16 + 1, 8), 251, "ids", prov);
      data::write_token_file(d + "/val.h5", walk(9 * 16 + 1, 9), 251, "ids", prov);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

const char* kGqa =
    "{name: llama, vocab_size: 256, seq_len: 16, layers: 4, width: 32, heads: 4, kv_heads: 2, "
    "ffn_width: 48, rope_theta: 10000, rope_scaling: llama3, rope_original_context: 64, "
    "tied_embeddings: true, attention: explicit}";
const char* kQwen3Mqa =
    "{name: llama, architecture: qwen3, vocab_size: 251, seq_len: 16, layers: 4, width: 32, "
    "heads: 4, kv_heads: 1, head_dim: 12, ffn_width: 40, qkv_bias: true, norm_eps: 1.0e-6, "
    "rope_theta: 10000, tied_embeddings: false, attention: explicit}";

struct Layout {
  const char* model;
  int tp = 1;
  int pp = 1;
  int accumulation = 1;
  const char* shard = "none";
  const char* recompute = "none";
};

Config make_config(const Layout& l, const std::string& run_dir, std::int64_t batch) {
  Config c = Config::parse(
      str("run: {seed: 5, epochs: 10, max_steps: ", kSteps, "}\nmodel: ", l.model,
          "\ndata: {shuffle: true, batch_size: ", batch,
          "}\n"
          // Clipping below the gradient norm, so the norm over shards and stages matters.
          "optim: {name: adamw, lr: 0.003, weight_decay: 0.1, grad_clip: 0.5, "
          "grad_accumulation: ",
          l.accumulation,
          "}\n"
          "schedule: {name: cosine, warmup_steps: 2}\n"
          "eval: {at_end: true, batch_size: 3}\n"
          "logging: {every_steps: 1, progress: off}\n"
          "checkpoint: {every_steps: 0}\n"),
      "<test>");
  c.set("data.train=" + data_dir() + "/train.h5");
  c.set("data.val=" + data_dir() + "/val.h5");
  c.set("run.dir=" + run_dir);
  c.set(str("model.recompute=", l.recompute));
  return c;
}

void run(MPI_Comm base, int tp, int pp, Config config) {
  runtime::ProcessGrid grid(rt(), tp, pp, base);
  runtime::DeviceBinding cpu;
  auto comms = comm::make_group_communicators(rt(), grid, cpu, "mpi");
  Trainer trainer(config, "unused", comm::Environment{rt(), grid, cpu, comms}, "none");
  trainer.run();
}

std::vector<nlohmann::json> records(const std::string& run_dir, const std::string& type) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == type) out.push_back(std::move(j));
  }
  return out;
}

void check(const Layout& l) {
  const int world = rt().world_size();
  if (world % (l.tp * l.pp) != 0) return;
  const int dp = world / (l.tp * l.pp);
  const std::string what = str(l.model == kGqa ? "gqa" : "qwen3-mqa", "-dp", dp, "-tp", l.tp, "-pp",
                               l.pp, "-acc", l.accumulation, "-", l.shard, "-", l.recompute);
  SCOPED_TRACE(what);
  Config dist = make_config(l, data_dir() + "/" + what, kBatchPerRank);
  dist.set(str("parallel.tp=", l.tp));
  dist.set(str("parallel.pp=", l.pp));
  dist.set(str("parallel.shard=", l.shard));
  run(MPI_COMM_WORLD, l.tp, l.pp, dist);
  // One rank with the whole global batch (every rank runs it; rank 0's is read).
  const std::string ref_dir = str(data_dir(), "/", what, "-ref", rt().world_rank());
  Layout one{l.model};
  one.recompute = l.recompute;
  run(MPI_COMM_SELF, 1, 1, make_config(one, ref_dir, kBatchPerRank * dp * l.accumulation));
  if (rt().world_rank() != 0) return;
  const auto mine = records(data_dir() + "/" + what, "train");
  const auto ref = records(ref_dir, "train");
  ASSERT_EQ(mine.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(ref.size(), static_cast<std::size_t>(kSteps));
  double worst = 0;
  for (std::size_t s = 0; s < mine.size(); ++s) {
    const double diff = std::fabs(mine[s]["loss"].get<double>() - ref[s]["loss"].get<double>());
    worst = std::max(worst, diff);
    EXPECT_LE(diff, 1e-5) << "step " << s + 1;
    // The norm within 1e-4 relative: at the steps where it jumps (qwen3-mqa at dp = 2: 1.5 ->
    // 4.3) the sum over ranks' halves of the batch differs from one rank's by a few 1e-5.
    EXPECT_NEAR(mine[s]["grad_norm"].get<double>(), ref[s]["grad_norm"].get<double>(),
                1e-4 * ref[s]["grad_norm"].get<double>())
        << "step " << s + 1;
  }
  EXPECT_GT(ref.front()["grad_norm"].get<double>(), 0.5);  // clipping fired
  if (l.model == kGqa) {
    // The tied head learns the walk's neighbourhoods within 20 steps.
    EXPECT_LT(ref.back()["loss"].get<double>(), ref.front()["loss"].get<double>() - 0.1);
  } else {
    // The untied head of qwen3-mqa barely learns them in 20 steps (5.40 -> 5.44 at lr 0.003, as
    // scripts/llama_torch_reference.py's training of the same shape does): the run must at least
    // have moved the weights.
    EXPECT_GT(std::fabs(ref.back()["loss"].get<double>() - ref.front()["loss"].get<double>()),
              0.01);
  }
  const auto eval = records(data_dir() + "/" + what, "eval");
  const auto ref_eval = records(ref_dir, "eval");
  ASSERT_EQ(eval.size(), 1u);
  ASSERT_EQ(ref_eval.size(), 1u);
  EXPECT_NEAR(eval[0]["loss"].get<double>(), ref_eval[0]["loss"].get<double>(), 1e-5);
  std::printf("[ measured ] llama %s: max |loss - loss(one rank)| over %lld steps = %.3g\n",
              what.c_str(), static_cast<long long>(kSteps), worst);
}

TEST(LlamaLayouts, DataTensorAndPipelineParallel) {
  for (const char* model : {kGqa, kQwen3Mqa}) {
    check({model, 1});        // dp = world
    check({model, 2});        // tp = 2 (GQA: kv split; MQA: replicated)
    check({model, 1, 2, 4});  // pp = 2, accumulation 4
    check({model, 2, 2, 2});  // tp = 2 x pp = 2 (4 ranks)
    check({model, 4, 1, 1});  // tp = 4: kv replicated for both shapes (4 ranks)
  }
}

TEST(LlamaLayouts, ShardModesAndRecomputation) {
  check({kGqa, 1, 1, 2, "optimizer", "block"});
  check({kQwen3Mqa, 1, 1, 1, "gradients", "attention"});
  check({kGqa, 1, 1, 1, "full", "block"});
  check({kQwen3Mqa, 2, 1, 2, "full"});               // dp x tp with full sharding
  check({kGqa, 1, 2, 4, "optimizer", "attention"});  // pp with a sharded optimizer
}

}  // namespace
}  // namespace hpctrain::train
