// The gpt cut into pipeline stages, all in one process: every (pp, V) cut holds the whole model's
// parameters once (names, values), chaining the stages' forward_chunk in stage order gives the
// whole model's logits bit for bit, and backward through the chain gives its gradients (the tied
// embedding's as the sum of its two copies'); the split of blocks, shape errors, and models that
// cannot be cut.

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::model {
namespace {

const char* kModel =
    "model: {name: gpt, vocab_size: 64, seq_len: 8, layers: 4, heads: 2, width: 16, "
    "tied_embeddings: true, dropout: 0.0}";

std::shared_ptr<Model> build(const std::string& yaml, const PipelinePart& part,
                             const std::vector<std::string>& overrides = {}) {
  Config config = Config::parse(yaml, "<test>");
  for (const auto& o : overrides) config.set(o);
  ConfigSection section = config.section("model");
  ModelContext ctx;
  ctx.seed = 11;
  ctx.pipeline = part;
  return build_model(section, ctx);
}

// Every pp rank's part of a cut, indexed by pp rank.
std::vector<std::shared_ptr<Model>> cut(int pp, int v, const std::vector<std::string>& overrides,
                                        const std::vector<int>& layers = {}) {
  std::vector<std::shared_ptr<Model>> ranks;
  for (int r = 0; r < pp; ++r)
    ranks.push_back(build(kModel, PipelinePart{pp, v, r, layers}, overrides));
  return ranks;
}

struct Result {
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads;  // summed over copies
};

torch::Tensor tokens() {
  return torch::arange(2 * 8, torch::kLong).view({2, 8}).remainder(64);
}

Result run_whole(const std::vector<std::string>& overrides) {
  auto model = build(kModel, PipelinePart{}, overrides);
  model->train();
  Result r;
  r.logits = model->forward(tokens());
  auto targets = tokens().roll(1, 1);
  model->loss(r.logits, targets).loss.backward();
  for (const auto& p : model->named_parameters(true)) r.grads[p.key()] = p.value().grad().clone();
  return r;
}

// Runs the stages in stage order, each on detached inputs (as the executor receives them), and
// backward stage by stage with the received output gradients.
Result run_cut(int pp, int v, const std::vector<std::string>& overrides,
               const std::vector<int>& layers = {}) {
  auto ranks = cut(pp, v, overrides, layers);
  const int stages = pp * v;
  std::vector<torch::Tensor> inputs(stages), outputs(stages);
  torch::Tensor x = tokens();
  for (int s = 0; s < stages; ++s) {
    Model& m = *ranks[static_cast<std::size_t>(plan::stage_rank(s, pp))];
    m.train();
    EXPECT_EQ(m.pipeline_chunks(), v);
    if (s > 0) {
      EXPECT_EQ(m.stage_activation_shape(tokens()), x.sizes().vec());
      x = x.detach().requires_grad_(true);
    }
    inputs[s] = x;
    x = m.forward_chunk(s / pp, x);
    outputs[s] = x;
  }
  Result r;
  r.logits = x.detach();
  auto& last = *ranks[static_cast<std::size_t>(plan::stage_rank(stages - 1, pp))];
  last.loss(outputs[stages - 1], tokens().roll(1, 1)).loss.backward();
  for (int s = stages - 2; s >= 0; --s) {
    torch::autograd::backward({outputs[s]}, {inputs[s + 1].grad()});
  }
  for (const auto& m : ranks) {
    for (const auto& p : m->named_parameters(true)) {
      auto it = r.grads.find(p.key());
      if (it == r.grads.end()) {
        r.grads[p.key()] = p.value().grad().clone();
      } else {
        it->second = it->second + p.value().grad();  // a tied copy
      }
    }
  }
  return r;
}

TEST(GptStages, EveryCutHoldsTheWholeModelOnceWithItsValues) {
  auto whole = build(kModel, PipelinePart{});
  std::map<std::string, torch::Tensor> want;
  for (const auto& p : whole->named_parameters(true)) want[p.key()] = p.value();
  for (auto [pp, v] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}}) {
    SCOPED_TRACE(str("pp=", pp, " V=", v));
    std::map<std::string, int> seen;
    for (const auto& m : cut(pp, v, {})) {
      for (const auto& p : m->named_parameters(true)) {
        ASSERT_TRUE(want.count(p.key())) << p.key();
        EXPECT_TRUE(torch::equal(p.value(), want[p.key()])) << p.key();
        seen[p.key()] += 1;
      }
    }
    EXPECT_EQ(seen.size(), want.size());
    for (const auto& [name, count] : seen) EXPECT_EQ(count, name == "wte.weight" ? 2 : 1) << name;
  }
}

TEST(GptStages, StagesHoldTheirBlocksAndTheTiedCopyIsNamed) {
  // 4 blocks over pp = 2 x V = 2: stage s holds block s; rank 0 holds stages 0 and 2.
  auto ranks = cut(2, 2, {});
  auto* rank0 = dynamic_cast<Gpt*>(ranks[0].get());
  auto* rank1 = dynamic_cast<Gpt*>(ranks[1].get());
  ASSERT_TRUE(rank0 && rank1);
  EXPECT_EQ(rank0->chunk_blocks(0), (std::pair<std::int64_t, std::int64_t>(0, 1)));
  EXPECT_EQ(rank0->chunk_blocks(1), (std::pair<std::int64_t, std::int64_t>(2, 3)));
  EXPECT_EQ(rank1->chunk_blocks(1), (std::pair<std::int64_t, std::int64_t>(3, 4)));
  EXPECT_TRUE(rank0->wte && rank0->wpe && !rank0->ln_f);
  EXPECT_TRUE(rank1->wte && !rank1->wpe && rank1->ln_f);  // the head's copy of wte
  auto c0 = rank0->stage_copies();
  auto c1 = rank1->stage_copies();
  ASSERT_EQ(c0.size(), 1u);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c0[0].name, "wte.weight");
  EXPECT_TRUE(c0[0].primary);
  EXPECT_EQ(c0[0].other_stage, 3);
  EXPECT_FALSE(c1[0].primary);
  EXPECT_EQ(c1[0].other_stage, 0);
  // Untied: no copies, the head on the last stage only.
  auto untied = cut(2, 1, {"model.tied_embeddings=false"});
  EXPECT_TRUE(untied[0]->stage_copies().empty() && untied[1]->stage_copies().empty());
  EXPECT_FALSE(dynamic_cast<Gpt&>(*untied[1]).wte);
  EXPECT_TRUE(dynamic_cast<Gpt&>(*untied[1]).lm_head);
  // The ledger's FLOPs are the whole model's on every stage.
  const double flops = build(kModel, PipelinePart{})->forward_flops_per_sample();
  for (const auto& m : ranks) EXPECT_EQ(m->forward_flops_per_sample(), flops);
}

TEST(GptStages, ChainedStagesGiveTheWholeModelsLogitsAndGradients) {
  for (const char* tied : {"model.tied_embeddings=true", "model.tied_embeddings=false"}) {
    const Result whole = run_whole({tied});
    for (auto [pp, v] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {2, 2}}) {
      SCOPED_TRACE(str(tied, " pp=", pp, " V=", v));
      const Result staged = run_cut(pp, v, {tied});
      // The same operations on the same values: the same bits.
      EXPECT_TRUE(torch::equal(staged.logits, whole.logits));
      ASSERT_EQ(staged.grads.size(), whole.grads.size());
      for (const auto& [name, g] : whole.grads) {
        ASSERT_TRUE(staged.grads.count(name)) << name;
        // The tied copies' sum adds the head's and the embedding's parts in the other order.
        EXPECT_TRUE(torch::allclose(staged.grads.at(name), g, 0, 1e-7)) << name;
      }
    }
  }
  // An uneven parallel.pp_layers cut computes the same function.
  const Result whole = run_whole({});
  const Result uneven = run_cut(2, 1, {}, {3, 1});
  EXPECT_TRUE(torch::equal(uneven.logits, whole.logits));
}

TEST(GptStages, BlockSplitAndShapeErrors) {
  EXPECT_EQ(plan::pipeline_stage_blocks(4, 2), (std::vector<int>{2, 2}));
  EXPECT_EQ(plan::pipeline_stage_blocks(7, 3), (std::vector<int>{2, 2, 3}));
  EXPECT_EQ(plan::pipeline_stage_blocks(10, 4), (std::vector<int>{2, 2, 3, 3}));
  EXPECT_EQ(plan::pipeline_stage_blocks(5, 2, {4, 1}), (std::vector<int>{4, 1}));
  try {
    build(kModel, PipelinePart{4, 2, 0, {}});  // 8 stages, 4 blocks
    ADD_FAILURE() << "8 stages of 4 blocks";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("8 model stages but model.layers = 4"), std::string::npos) << what;
    EXPECT_NE(what.find("use at most 4 stages"), std::string::npos) << what;
  }
  EXPECT_THROW(build(kModel, PipelinePart{2, 1, 0, {3, 2}}), ConfigError);  // sums to 5
  EXPECT_THROW(build(kModel, PipelinePart{2, 1, 0, {4}}), ConfigError);     // one entry
  EXPECT_THROW(build(kModel, PipelinePart{2, 1, 0, {4, 0}}), ConfigError);  // an empty stage
}

TEST(GptStages, ModelsThatCannotBeCutAreConfigErrorsNamingThem) {
  for (auto [name, yaml] : std::vector<std::pair<std::string, std::string>>{
           {"mlp", "model: {name: mlp, in_features: 4}"}, {"cnn", "model: {name: cnn}"}}) {
    try {
      build(yaml, PipelinePart{2, 1, 0, {}});
      ADD_FAILURE() << yaml;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("cannot be cut into pipeline stages (parallel.pp = 2)"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("model.name = " + name), std::string::npos) << what;
    }
  }
  // Uncut, the gpt is one chunk; the mlp has no stages at all.
  EXPECT_EQ(build("model: {name: mlp, in_features: 4}", PipelinePart{})->pipeline_chunks(), 0);
  EXPECT_EQ(build(kModel, PipelinePart{})->pipeline_chunks(), 1);
  // A cut model's forward() is refused: its stages run through forward_chunk.
  EXPECT_THROW(cut(2, 1, {})[0]->forward(tokens()), Error);
}

}  // namespace
}  // namespace hpctrain::model
