// The llama family in one process (no MPI): its rotary frequencies under Llama-3.1's scaling
// against the three regions of the rule, the model cut into two pipeline stages giving the whole
// model's logits bit for bit, cached decoding giving the whole forward pass's logits, the parameter
// count against the plan's shape for GQA / MQA / q/k norm and bias / tied and untied heads, the
// validation of its keys, and config.json setting and checking them (model/llama_hf.hpp).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "hpctrain/model/kv_cache.hpp"
#include "hpctrain/model/llama.hpp"
#include "hpctrain/model/llama_hf.hpp"
#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::model {
namespace {

std::shared_ptr<Model> build(const std::string& yaml, const PipelinePart& part = {}) {
  Config config = Config::parse(yaml, "<test>");
  ConfigSection section = config.section("model");
  ModelContext ctx;
  ctx.seed = 3;
  ctx.pipeline = part;
  return build_model(section, ctx);
}

TEST(Llama, RopeScalingKeepsBlendsAndStretches) {
  LlamaOptions o;
  o.head_dim = 16;
  o.rope_theta = 10000;
  o.rope.llama3 = true;
  o.rope.factor = 8;
  o.rope.low_freq_factor = 1;
  o.rope.high_freq_factor = 4;
  o.rope.original_context = 32;
  const RotaryTable table(o);
  ASSERT_EQ(table.frequencies().size(), 8u);
  constexpr double kPi = 3.14159265358979323846;
  // Wavelengths 2 pi / w_j = 6.3, 19.9, 62.8, ...: below 32 / 4 kept, between 32 / 4 and 32 / 1
  // blended, above divided by the factor.
  EXPECT_DOUBLE_EQ(table.frequencies()[0], 1.0);
  const double w1 = std::pow(10000.0, -2.0 / 16);
  const double s = (32 / (2 * kPi / w1) - 1) / (4 - 1);
  EXPECT_NEAR(table.frequencies()[1], (1 - s) * w1 / 8 + s * w1, 1e-15);
  EXPECT_GT(table.frequencies()[1], w1 / 8);
  EXPECT_LT(table.frequencies()[1], w1);
  for (int j = 2; j < 8; ++j) {
    EXPECT_DOUBLE_EQ(table.frequencies()[static_cast<std::size_t>(j)],
                     std::pow(10000.0, -2.0 * j / 16) / 8);
  }
}

const char* kQwen3 =
    "model: {name: llama, architecture: qwen3, vocab_size: 50, seq_len: 8, layers: 4, width: 16, "
    "heads: 4, kv_heads: 1, head_dim: 6, ffn_width: 24, qkv_bias: true, tied_embeddings: true, "
    "attention: explicit}";

TEST(Llama, TwoStagesGiveTheWholeModelsLogits) {
  auto whole = build(kQwen3);
  whole->eval();
  const torch::Tensor tokens = torch::arange(16, torch::kLong).view({2, 8}).remainder(50);
  torch::NoGradGuard no_grad;
  const torch::Tensor want = whole->forward(tokens);
  auto first = build(kQwen3, PipelinePart{2, 1, 0, {}});
  auto second = build(kQwen3, PipelinePart{2, 1, 1, {}});
  first->eval();
  second->eval();
  const torch::Tensor got = second->forward_chunk(0, first->forward_chunk(0, tokens));
  EXPECT_TRUE(torch::equal(got, want));
  // The stages hold the whole model's parameters (the tied wte on both: one copy counts).
  EXPECT_EQ(first->logical_parameter_count() + second->logical_parameter_count() - 50 * 16,
            whole->logical_parameter_count());
  ASSERT_EQ(second->stage_copies().size(), 1u);
  EXPECT_EQ(second->stage_copies()[0].name, "wte.weight");
  EXPECT_FALSE(second->stage_copies()[0].primary);
}

// Incremental decoding (model/kv_cache.hpp): a prefill of left-padded prompts, then one token at a
// time, gives each row the logits the whole forward pass gives that row alone (rotary positions
// counted after the row's padding, grouped-query attention over the cached kv heads), for GQA
// with Llama-3.1's rope scaling and for Qwen3's q/k norm and bias with MQA.
TEST(Llama, CachedDecodingEqualsTheWholeForward) {
  const char* kGqa =
      "model: {name: llama, vocab_size: 50, seq_len: 12, layers: 2, width: 16, heads: 4, "
      "kv_heads: 2, ffn_width: 24, rope_theta: 10000, rope_scaling: llama3, rope_factor: 8, "
      "rope_original_context: 8, init_std: 0.3, attention: explicit}";
  std::string qwen3 = kQwen3;  // weights large enough that attention is far from uniform
  qwen3.replace(qwen3.find("seq_len: 8"), 10, "seq_len: 12");
  qwen3.replace(qwen3.find("attention:"), 10, "init_std: 0.3, attention:");
  for (const std::string& yaml : {std::string(kGqa), qwen3}) {
    auto model = build(yaml);
    model->eval();
    auto* decoder = decoder_of(*model);
    ASSERT_NE(decoder, nullptr) << yaml;
    EXPECT_EQ(decoder->context_length(), 12);
    torch::NoGradGuard no_grad;
    const std::vector<std::vector<std::int64_t>> rows{{3, 17, 5, 40, 22, 9, 31, 8, 14, 2},
                                                      {11, 6, 49, 27, 1, 36, 13, 20, 4, 45}};
    const std::vector<std::int64_t> prompt{4, 7};  // row 1 padded by 3 positions
    const std::int64_t longest = 7;
    auto cache =
        decoder->make_kv_cache(2, 10, torch::tensor({longest - prompt[0], longest - prompt[1]}));
    ASSERT_NE(cache, nullptr);
    torch::Tensor prefill = torch::zeros({2, longest}, torch::kLong);
    for (std::size_t b = 0; b < 2; ++b) {
      const std::int64_t n = prompt[b];
      prefill[static_cast<std::int64_t>(b)]
          .narrow(0, longest - n, n)
          .copy_(torch::tensor(rows[b], torch::kLong).narrow(0, 0, n));
    }
    std::vector<torch::Tensor> got{decoder->forward_cached(prefill, *cache)};
    for (std::int64_t s = 0; s < 3; ++s) {
      torch::Tensor next = torch::empty({2, 1}, torch::kLong);
      for (std::size_t b = 0; b < 2; ++b) {
        next[static_cast<std::int64_t>(b)][0] = rows[b][static_cast<std::size_t>(prompt[b] + s)];
      }
      got.push_back(decoder->forward_cached(next, *cache));
    }
    EXPECT_EQ(cache->length(), longest + 3);
    for (std::size_t b = 0; b < 2; ++b) {
      const std::int64_t n = prompt[b] + 3;
      const torch::Tensor whole =
          model->forward(torch::tensor(rows[b], torch::kLong).narrow(0, 0, n).view({1, n}))[0];
      const auto r = static_cast<std::int64_t>(b);
      const torch::Tensor mine = torch::cat(
          {got[0][r].narrow(0, longest - prompt[b], prompt[b]), got[1][r], got[2][r], got[3][r]});
      EXPECT_TRUE(torch::allclose(mine, whole, 1e-5, 1e-5))
          << yaml << " row " << b << ": max |difference| "
          << (mine - whole).abs().max().item<double>();
    }
  }
}

TEST(Llama, ParameterCountAndFlopsMatchThePlansShape) {
  for (const char* yaml :
       {"model: {name: llama, vocab_size: 64, seq_len: 8, layers: 2, width: 32, heads: 4, "
        "kv_heads: 2, ffn_width: 40}",
        kQwen3,
        "model: {name: llama, architecture: qwen2, vocab_size: 70, seq_len: 12, layers: 3, "
        "width: 24, heads: 6, kv_heads: 6, ffn_width: 48, tied_embeddings: false}"}) {
    Config config = Config::parse(yaml, "<test>");
    ConfigSection section = config.section("model");
    const LlamaOptions o = read_llama_options(section, 1);
    auto built = build(yaml);
    const plan::TransformerShape shape = llama_shape(o);
    const double n = plan::transformer_non_embedding_parameters(shape);
    EXPECT_DOUBLE_EQ(n + plan::transformer_embedding_parameters(shape),
                     static_cast<double>(built->logical_parameter_count()))
        << yaml;
    // 2 (N + V D) per token plus 4 layers T heads head_dim.
    const double per_token = 2 * (n + static_cast<double>(o.vocab_size * o.width)) +
                             4.0 * static_cast<double>(o.layers * o.seq_len * o.heads * o.head_dim);
    EXPECT_DOUBLE_EQ(built->forward_flops_per_sample(), static_cast<double>(o.seq_len) * per_token)
        << yaml;
  }
}

TEST(Llama, PublishedShapesHaveTheirPublishedSizes) {
  // Llama-3.1-8B: 8,030,261,248 parameters; Llama-3.2-1B (tied): 1,235,814,400.
  plan::TransformerShape s;
  s.layers = 32;
  s.width = 4096;
  s.vocab_size = 128256;
  s.tied_embeddings = false;
  s.heads = 32;
  s.kv_heads = 8;
  s.head_dim = 128;
  s.ffn_width = 14336;
  s.swiglu = true;
  EXPECT_DOUBLE_EQ(
      plan::transformer_non_embedding_parameters(s) + plan::transformer_embedding_parameters(s),
      8030261248.0);
  s.layers = 16;
  s.width = 2048;
  s.head_dim = 64;
  s.ffn_width = 8192;
  s.tied_embeddings = true;
  EXPECT_DOUBLE_EQ(
      plan::transformer_non_embedding_parameters(s) + plan::transformer_embedding_parameters(s),
      1235814400.0);
}

void expect_config_error(const std::string& yaml, const std::string& needle) {
  try {
    build(yaml);
    ADD_FAILURE() << "no error for " << yaml;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Llama, KeysAreChecked) {
  expect_config_error("model: {name: llama, heads: 4, kv_heads: 3}", "model.kv_heads = '3'");
  expect_config_error("model: {name: llama, heads: 4, head_dim: 7}", "model.head_dim = '7'");
  expect_config_error("model: {name: llama, rope_scaling: yarn}", "model.rope_scaling");
  expect_config_error("model: {name: llama, seq_len: 64, max_positions: 32}",
                      "model.max_positions = '32'");
}

TEST(Llama, ConfigJsonSetsAndChecksTheKeys) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("llama_unit_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen3ForCausalLM"],
    "vocab_size": 40, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 6, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "max_position_embeddings": 64, "tie_word_embeddings": true,
    "hidden_act": "silu", "attention_bias": false})";
  Config config =
      Config::parse("model: {name: llama, seq_len: 8, init_from: " + dir.string() + "}", "<test>");
  ConfigSection section = config.section("model");
  const LlamaOptions o = read_llama_options(section, 1);
  EXPECT_EQ(o.architecture, LlamaArchitecture::kQwen3);
  EXPECT_EQ(o.layers, 2);
  EXPECT_EQ(o.kv_heads, 2);
  EXPECT_EQ(o.head_dim, 6);
  EXPECT_TRUE(o.qk_norm);
  EXPECT_FALSE(o.qkv_bias);
  EXPECT_TRUE(o.tied_embeddings);
  EXPECT_DOUBLE_EQ(o.rope_theta, 1e6);
  EXPECT_EQ(o.max_positions, 64);
  // Recorded in the resolved config: a stored config rebuilds the model without the folder.
  EXPECT_NE(config.dump().find("kv_heads: 2"), std::string::npos) << config.dump();
  // The export writes config.json back with the same keys.
  const nlohmann::json back = llama_hf_config(o);
  EXPECT_EQ(back["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(back["num_key_value_heads"], 2);
  EXPECT_EQ(back["head_dim"], 6);

  Config disagree =
      Config::parse("model: {name: llama, layers: 3, init_from: " + dir.string() + "}", "<test>");
  ConfigSection s2 = disagree.section("model");
  try {
    read_llama_options(s2, 1);
    ADD_FAILURE() << "no error for a disagreeing model.layers";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers = '3': disagrees with"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers = 2"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "config.json") << R"({"architectures": ["PhiForCausalLM"]})";
  Config unknown = Config::parse("model: {name: llama, init_from: " + dir.string() + "}", "<t>");
  ConfigSection s3 = unknown.section("model");
  EXPECT_THROW(read_llama_options(s3, 1), CheckpointError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hpctrain::model
