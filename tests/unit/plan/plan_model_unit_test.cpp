// The plan's FLOP and parameter counts against the models the trainer actually builds: the only
// plan test that needs LibTorch (plan_unit_test links the pure plan library alone).

#include <gtest/gtest.h>

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/model/model_family.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/config.hpp"

namespace hpctrain::plan {
namespace {

TEST(PlanFlops, TransformerCountMatchesTheBuiltGpt) {
  for (const char* yaml :
       {"model: {name: gpt, vocab_size: 256, seq_len: 16, layers: 2, heads: 4, width: 32}",
        "model: {name: gpt, vocab_size: 300, seq_len: 24, layers: 3, heads: 2, width: 16, "
        "mlp_ratio: 2, tied_embeddings: false}"}) {
    Config config = Config::parse(yaml, "<test>");
    auto section = config.section("model");
    const model::GptOptions g = model::read_gpt_options(section, 1);
    model::ModelContext ctx;
    auto built = model::build_model(section, ctx);
    const TransformerShape shape{g.layers,     g.width,     g.seq_len,
                                 g.vocab_size, g.mlp_ratio, g.tied_embeddings};
    const double n = transformer_non_embedding_parameters(shape);
    EXPECT_DOUBLE_EQ(n + transformer_embedding_parameters(shape),
                     static_cast<double>(built->logical_parameter_count()))
        << yaml;
    EXPECT_DOUBLE_EQ(static_cast<double>(g.seq_len) *
                         (transformer_forward_flops_per_token(n, g.layers, g.seq_len, g.width) +
                          transformer_head_flops_per_token(g.width, g.vocab_size)),
                     built->forward_flops_per_sample())
        << yaml;
  }
}

// The registry's facts of each family (model_family.hpp), which the section's reader, the
// plan and the export read instead of the family's name, against a built model of the family.
TEST(ModelFamilies, FactsAgreeWithTheBuiltModels) {
  for (const char* yaml :
       {"model: {name: mlp, in_features: 12, hidden: [8], num_classes: 3}", "model: {name: cnn}",
        "model: {name: gpt, vocab_size: 256, seq_len: 16, layers: 2, heads: 4, width: 32}",
        "model: {name: llama, vocab_size: 256, seq_len: 16, layers: 2, heads: 4, kv_heads: 2, "
        "width: 32, ffn_width: 48}"}) {
    Config config = Config::parse(yaml, "<test>");
    auto section = config.section("model");
    const model::ModelFamily* family =
        model::find_model_family(section.get<std::string>("name", ""));
    ASSERT_NE(family, nullptr) << yaml;
    model::ModelContext ctx;
    auto built = model::build_model(section, ctx);
    EXPECT_EQ(family->task, built->task()) << yaml;
    // Cut into stages (a decoder: its stages are its chunks) or one stage.
    EXPECT_EQ(family->decoder, built->pipeline_chunks() > 0) << yaml;
    EXPECT_EQ(family->single_stage, built->pipeline_chunks() == 0) << yaml;
    EXPECT_EQ(family->decoder, family->decoder_facts != nullptr) << yaml;
    if (family->decoder) {
      // The shape the plan reads without building: the built model's parameters and FLOPs.
      const model::DecoderFacts f = family->decoder_facts(section, 1);
      EXPECT_DOUBLE_EQ(
          transformer_non_embedding_parameters(f.shape) + transformer_embedding_parameters(f.shape),
          static_cast<double>(built->logical_parameter_count()))
          << yaml;
      EXPECT_DOUBLE_EQ(
          static_cast<double>(f.shape.seq_len) * transformer_forward_flops_per_token(f.shape),
          built->forward_flops_per_sample())
          << yaml;
    }
  }
  const model::ModelFamily* torchscript = model::find_model_family("torchscript");
  ASSERT_NE(torchscript, nullptr);
  EXPECT_FALSE(torchscript->task.has_value());  // model.task says
  EXPECT_TRUE(torchscript->single_stage);
  EXPECT_FALSE(torchscript->decoder);
  // A plugin's model: a family without facts (its task and stages are the built model's).
  EXPECT_EQ(model::find_model_family("family_test_plugin"), nullptr);
  model::register_model("family_test_plugin", [](ConfigSection&, const model::ModelContext&) {
    return std::shared_ptr<model::Model>();
  });
  const model::ModelFamily* plugin = model::find_model_family("family_test_plugin");
  ASSERT_NE(plugin, nullptr);
  EXPECT_FALSE(plugin->task.has_value() || plugin->decoder || plugin->single_stage ||
               plugin->rebuilt_by_export || plugin->decoder_facts || plugin->prepare_section);
}

TEST(PlanFlops, MlpMatchesAHandCount) {
  Config config = Config::parse(
      "model: {name: mlp, in_features: 784, hidden: [256, 128, 100], num_classes: 10}", "<test>");
  auto section = config.section("model");
  model::ModelContext ctx;
  auto mlp = model::build_model(section, ctx);
  // Multiply-adds (2 FLOPs each) of 784-256-128-100-10 plus one add per bias.
  const double weights = 784.0 * 256 + 256.0 * 128 + 128.0 * 100 + 100.0 * 10;
  const double biases = 256 + 128 + 100 + 10;
  EXPECT_DOUBLE_EQ(mlp->forward_flops_per_sample(), 2 * weights + biases);  // 495,038
  EXPECT_EQ(mlp->logical_parameter_count(), static_cast<std::int64_t>(weights + biases));

  PlanInputs in;
  in.model_name = "mlp";
  in.parameters = weights + biases;
  in.forward_flops_per_sample = mlp->forward_flops_per_sample();
  in.train_samples = 60000;
  const ComputePlan plan = make_plan(in);
  EXPECT_DOUBLE_EQ(plan.train_flops, 3 * 60000 * (2 * weights + biases));
  // Adam: 4 bytes of weight + 8 of state per parameter.
  EXPECT_DOUBLE_EQ(plan.checkpoint_bytes, 12 * (weights + biases));
}

}  // namespace
}  // namespace hpctrain::plan
