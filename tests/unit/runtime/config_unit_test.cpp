#include <gtest/gtest.h>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ReadsValuesDefaultsAndRecordsThem) {
  Config c = Config::parse("optim:\n  lr: 0.01\n  name: adamw\nrun:\n  seed: 7\n", "t.yaml");
  auto optim = c.section("optim");
  EXPECT_DOUBLE_EQ(optim.get<double>("lr", 1.0), 0.01);
  EXPECT_EQ(optim.get<std::string>("name", "sgd"), "adamw");
  EXPECT_DOUBLE_EQ(optim.get<double>("weight_decay", 0.1), 0.1);
  EXPECT_EQ(c.section("run").get<int>("seed", 0), 7);
  EXPECT_NO_THROW(c.check_unknown_keys());
  Config again = Config::parse(c.dump(), "dump");
  EXPECT_DOUBLE_EQ(again.section("optim").get<double>("weight_decay", 0), 0.1);
}

TEST(Config, OverridesParseAsYaml) {
  Config c = Config::parse("optim:\n  lr: 0.01\n", "t.yaml");
  c.set("optim.lr=3e-4");
  c.set("data.batch_size=128");
  c.set("eval.metrics=[loss, accuracy]");
  c.set("model.block.width=64");
  EXPECT_DOUBLE_EQ(c.section("optim").get<double>("lr", 0), 3e-4);
  EXPECT_EQ(c.section("data").get<int>("batch_size", 0), 128);
  EXPECT_EQ(c.section("eval").get<std::vector<std::string>>("metrics", {}).size(), 2u);
  EXPECT_EQ(c.section("model").section("block").get<int>("width", 0), 64);
  EXPECT_NE(error_of([&] { c.set("lr=3"); }).find("needs a section"), std::string::npos);
  EXPECT_NE(error_of([&] { c.set("optim.lr"); }).find("section.key=value"), std::string::npos);
}

TEST(Config, UnknownKeysAreNamedWithASuggestion) {
  Config c = Config::parse("optim:\n  lrr: 0.01\n  name: sgd\n", "t.yaml");
  auto optim = c.section("optim");
  optim.get<double>("lr", 0.1);
  optim.get<std::string>("name", "sgd");
  std::string message = error_of([&] { c.check_unknown_keys(); });
  EXPECT_NE(message.find("unknown key 'optim.lrr' (did you mean 'optim.lr'?)"), std::string::npos)
      << message;
}

TEST(Config, WrongTypesNameTheKey) {
  Config c = Config::parse("data:\n  batch_size: many\n  shuffle: yes\n  steps: 3.5\n", "t.yaml");
  auto data = c.section("data");
  std::string m = error_of([&] { data.get<int>("batch_size", 1); });
  EXPECT_NE(m.find("data.batch_size = 'many': expected an integer"), std::string::npos) << m;
  m = error_of([&] { data.get<bool>("shuffle", true); });
  EXPECT_NE(m.find("data.shuffle = 'yes': expected true or false"), std::string::npos) << m;
  m = error_of([&] { data.get<int>("steps", 1); });
  EXPECT_NE(m.find("data.steps"), std::string::npos) << m;
  m = error_of([&] { data.require<std::string>("train"); });
  EXPECT_NE(m.find("missing required key 'data.train'"), std::string::npos) << m;
  m = error_of([&] { data.check_choice("kind", "zip", {"a", "b"}); });
  EXPECT_NE(m.find("must be one of a, b"), std::string::npos) << m;
}

TEST(Config, SyntaxErrorsGiveTheLine) {
  std::string m = error_of([] { Config::parse("optim:\n  lr: [1, 2\nrun: {}\n", "bad.yaml"); });
  EXPECT_NE(m.find("bad.yaml: YAML syntax error at line"), std::string::npos) << m;
  m = error_of([] { Config::load("/nonexistent/x.yaml"); });
  EXPECT_NE(m.find("cannot be opened"), std::string::npos) << m;
}

}  // namespace
}  // namespace hpctrain
