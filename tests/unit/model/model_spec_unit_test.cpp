// The `model` section as the rest of hpctrain reads it (model::ModelSpec): what each family
// declares (task, input, sequence length, vocabulary) with the families' own defaults, and the
// validation that names the key.

#include <gtest/gtest.h>

#include <string>

#include "hpctrain/model/model_spec.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::model {
namespace {

ModelSpec spec_of(const std::string& model_yaml) {
  Config config = Config::parse("model: " + model_yaml + "\n", "test.yaml");
  auto section = config.section("model");
  return ModelSpec::from(section);
}

// The message of the ConfigError reading `model_yaml` throws, or "" when it reads.
std::string error_of(const std::string& model_yaml) {
  try {
    spec_of(model_yaml);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelSpec, MlpAndCnnDeclareAClassifierAndItsInput) {
  const ModelSpec mlp = spec_of("{}");  // the default model
  EXPECT_EQ(mlp.name, "mlp");
  EXPECT_EQ(mlp.task, Task::kClassification);
  EXPECT_EQ(mlp.input_shape, std::vector<std::int64_t>{ModelSpec::kMlpInFeatures});
  EXPECT_EQ(mlp.seq_len, 0);
  EXPECT_EQ(mlp.vocab_size, 0);
  EXPECT_EQ(spec_of("{name: mlp, in_features: 12}").input_shape, std::vector<std::int64_t>{12});
  const ModelSpec cnn = spec_of("{name: cnn}");
  EXPECT_EQ(cnn.task, Task::kClassification);
  EXPECT_EQ(cnn.input_shape, ModelSpec::cnn_input_shape());
  EXPECT_EQ(spec_of("{name: cnn, input_shape: [3, 32, 32]}").input_shape,
            (std::vector<std::int64_t>{3, 32, 32}));
}

TEST(ModelSpec, TheGptDeclaresALanguageModelWithItsOwnDefaults) {
  const ModelSpec gpt = spec_of("{name: gpt}");
  EXPECT_EQ(gpt.task, Task::kLanguageModel);
  EXPECT_EQ(gpt.seq_len, 128);
  EXPECT_EQ(gpt.vocab_size, 256);
  EXPECT_TRUE(gpt.input_shape.empty());
  const ModelSpec sized = spec_of("{name: gpt, seq_len: 64, vocab_size: 50304}");
  EXPECT_EQ(sized.seq_len, 64);
  EXPECT_EQ(sized.vocab_size, 50304);
}

TEST(ModelSpec, UserModelsDeclareWhatTheySay) {
  EXPECT_EQ(spec_of("{name: torchscript, file: m.pt}").task, Task::kClassification);
  EXPECT_EQ(spec_of("{name: torchscript, file: m.pt, task: language_model, seq_len: 32}").task,
            Task::kLanguageModel);
  EXPECT_EQ(spec_of("{name: torchscript, task: regression}").task, Task::kRegression);
  // An unknown task stays open: the module's loader names the choices.
  EXPECT_FALSE(spec_of("{name: torchscript, task: ranking}").task.has_value());
  // A plugin's model says its task once built; its vocabulary when the section gives one.
  const ModelSpec plugin = spec_of("{name: resnet}");
  EXPECT_FALSE(plugin.task.has_value());
  EXPECT_EQ(plugin.vocab_size, 0);
  EXPECT_EQ(spec_of("{name: my_lm, vocab_size: 1000}").vocab_size, 1000);
}

TEST(ModelSpec, BadValuesNameTheirKey) {
  EXPECT_NE(error_of("{name: ''}").find("model.name"), std::string::npos);
  EXPECT_NE(error_of("{name: gpt, seq_len: -1}").find("model.seq_len"), std::string::npos);
  EXPECT_NE(error_of("{name: mlp, in_features: 0}").find("model.in_features"), std::string::npos);
  EXPECT_NE(error_of("{name: cnn, input_shape: [28, 28]}").find("model.input_shape"),
            std::string::npos);
  EXPECT_NE(error_of("{name: cnn, input_shape: [1, 0, 28]}").find("model.input_shape"),
            std::string::npos);
  EXPECT_NE(error_of("{name: gpt, vocab_size: -5}").find("model.vocab_size"), std::string::npos);
  EXPECT_NE(error_of("{name: my_lm, vocab_size: -5}").find("model.vocab_size"), std::string::npos);
  EXPECT_NE(error_of("{name: mlp, seq_len: abc}").find("model.seq_len"), std::string::npos);
  EXPECT_EQ(error_of("{name: gpt, seq_len: 16}"), "");
}

}  // namespace
}  // namespace hpctrain::model
