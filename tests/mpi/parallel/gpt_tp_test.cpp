// The whole GPT at every tp size against the unsharded model (tp = 1, built on each rank without
// a communicator): the same logical initial weights, the same logits, loss, metrics and
// gradients on a fixed batch, and the same loss curve over a few SGD steps. Two shapes: tied
// embeddings with a vocabulary that divides by tp, and an untied head with a padded vocabulary.

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/runtime/config.hpp"
#include "tp_test_util.hpp"

namespace hpctrain::model {
namespace {

using parallel::testing::expect_close;
using parallel::testing::make_group;
using parallel::testing::seeded_ids;
using parallel::testing::tp_sizes;

constexpr std::uint64_t kSeed = 2024;
constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeq = 16;

struct Shape {
  const char* name;
  const char* yaml;
  std::int64_t vocab;
};

const std::vector<Shape> kShapes = {
    {"tied", "model: {name: gpt, vocab_size: 256, seq_len: 16, layers: 2, heads: 4, width: 32}",
     256},
    {"untied-padded",
     "model: {name: gpt, vocab_size: 251, seq_len: 16, layers: 2, heads: 4, width: 32, "
     "mlp_ratio: 2, tied_embeddings: false}",
     251},
};

std::shared_ptr<Model> build(const Shape& shape, const parallel::CommPtr& tp) {
  Config config = Config::parse(shape.yaml, "<test>");
  ConfigSection section = config.section("model");
  ModelContext ctx;
  ctx.tp = tp;
  ctx.tp_rank = parallel::tp_rank_of(tp);
  ctx.tp_size = parallel::tp_size_of(tp);
  ctx.seed = kSeed;
  auto model = build_model(section, ctx);
  config.check_unknown_keys();
  return model;
}

parallel::TensorShard shard_of_param(const Model& model, const std::string& name) {
  ShardInfo info = model.shard_info(name);
  return parallel::TensorShard{info.logical_shape, info.split_dim};
}

// The logical logits [B, T, V] from every rank's vocabulary slice.
torch::Tensor gather_logits(const torch::Tensor& local, std::int64_t vocab,
                            const parallel::CommPtr& tp) {
  return parallel::gather_logical(local.detach(), {{local.size(0), local.size(1), vocab}, 2}, tp);
}

TEST(GptTensorParallel, SameLogicalInitialWeightsAtEveryTp) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    for (const auto& shape : kShapes) {
      auto ref = build(shape, nullptr);
      auto model = build(shape, g.tp);
      auto ref_params = ref->named_parameters();
      auto params = model->named_parameters();
      ASSERT_EQ(params.size(), ref_params.size()) << shape.name;
      EXPECT_EQ(model->logical_parameter_count(), ref->logical_parameter_count()) << shape.name;
      for (const auto& item : params) {
        const std::string what =
            std::string(shape.name) + " tp=" + std::to_string(tp) + " " + item.key();
        const torch::Tensor* want = ref_params.find(item.key());
        ASSERT_NE(want, nullptr) << what;
        auto shard = shard_of_param(*model, item.key());
        EXPECT_EQ(shard.logical_shape, want->sizes().vec()) << what;
        expect_close(parallel::gather_logical(item.value().detach(), shard, g.tp), *want, 0, what);
      }
    }
  }
}

TEST(GptTensorParallel, LogitsLossMetricsAndGradientsMatchUnsharded) {
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    for (const auto& shape : kShapes) {
      const std::string what = std::string(shape.name) + " tp=" + std::to_string(tp);
      auto ref = build(shape, nullptr);
      auto model = build(shape, g.tp);
      ref->to(torch::kDouble);
      model->to(torch::kDouble);
      auto inputs = seeded_ids({kBatch, kSeq}, shape.vocab, 51);
      auto targets = seeded_ids({kBatch, kSeq}, shape.vocab, 52);

      auto logits_ref = ref->forward(inputs);
      auto logits = model->forward(inputs);
      EXPECT_EQ(logits.size(-1), (shape.vocab + tp - 1) / tp) << what;
      expect_close(gather_logits(logits, shape.vocab, g.tp), logits_ref, 1e-10, what + " logits");

      LossOutput out_ref = ref->loss(logits_ref, targets);
      LossOutput out = model->loss(logits, targets);
      EXPECT_NEAR(out.loss.item<double>(), out_ref.loss.item<double>(), 1e-10) << what;
      EXPECT_NEAR(out.loss_sum, out_ref.loss_sum, 1e-8) << what;
      EXPECT_EQ(out.correct, out_ref.correct) << what;
      EXPECT_EQ(out.count, kBatch * kSeq) << what;
      EXPECT_EQ(out_ref.count, kBatch * kSeq) << what;

      out_ref.loss.backward();
      out.loss.backward();
      auto ref_params = ref->named_parameters();
      for (const auto& item : model->named_parameters()) {
        const torch::Tensor& want = *ref_params.find(item.key());
        ASSERT_TRUE(want.grad().defined()) << what << " " << item.key();
        ASSERT_TRUE(item.value().grad().defined()) << what << " " << item.key();
        auto grad =
            parallel::gather_logical(item.value().grad(), shard_of_param(*model, item.key()), g.tp);
        expect_close(grad, want.grad(), 1e-10, what + " grad " + item.key());
      }
    }
  }
}

// Replicated parameters (and their gradients) must be bitwise identical on every tp rank.
void expect_replicated_identical(Model& model, const parallel::CommPtr& tp, bool grads,
                                 const std::string& what) {
  if (parallel::tp_size_of(tp) == 1) return;
  for (const auto& item : model.named_parameters()) {
    if (model.shard_info(item.key()).split_dim >= 0) continue;
    torch::Tensor mine = (grads ? item.value().grad() : item.value()).detach().contiguous();
    torch::Tensor all = tp->all_gather(mine.unsqueeze(0));
    for (int i = 0; i < tp->size(); ++i) {
      EXPECT_TRUE(torch::equal(all[i], mine))
          << what << " " << item.key() << " differs on tp rank " << i << (grads ? " (grad)" : "");
    }
  }
}

TEST(GptTensorParallel, SgdStepsFollowTheUnshardedLossCurve) {
  constexpr int kSteps = 4;
  for (int tp : tp_sizes()) {
    auto g = make_group(tp);
    for (const auto& shape : kShapes) {
      const std::string what = std::string(shape.name) + " tp=" + std::to_string(tp);
      auto ref = build(shape, nullptr);
      auto model = build(shape, g.tp);
      torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.5));
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.5));
      std::vector<double> curve_ref;
      std::vector<double> curve;
      // One fixed batch: the loss must fall as the model memorises it.
      auto inputs = seeded_ids({kBatch, kSeq}, shape.vocab, 60);
      auto targets = seeded_ids({kBatch, kSeq}, shape.vocab, 70);
      for (int step = 0; step < kSteps; ++step) {
        ref_opt.zero_grad();
        LossOutput out_ref = ref->loss(ref->forward(inputs), targets);
        out_ref.loss.backward();
        ref_opt.step();
        curve_ref.push_back(out_ref.loss.item<double>());

        opt.zero_grad();
        LossOutput out = model->loss(model->forward(inputs), targets);
        out.loss.backward();
        // Without any synchronisation the replicated gradients already agree bit for bit.
        expect_replicated_identical(*model, g.tp, /*grads=*/true, what);
        if (g.tp->size() > 1) sync_replicated_gradients(*model, *g.tp);
        opt.step();
        curve.push_back(out.loss.item<double>());
      }
      for (int step = 0; step < kSteps; ++step) {
        EXPECT_NEAR(curve[step], curve_ref[step], 1e-4) << what << " step " << step;
      }
      EXPECT_LT(curve.back(), curve.front()) << what << ": training should reduce the loss";
      expect_replicated_identical(*model, g.tp, /*grads=*/false, what);
    }
  }
}

}  // namespace
}  // namespace hpctrain::model
