#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <stdexcept>

#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

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

// A value read whole (data.train = {path, format}: its reader checks the fields) covers its
// leaves; a section read key by key covers none of its unread keys.
TEST(Config, AValueReadWholeCoversItsFieldsASectionDoesNot) {
  Config c =
      Config::parse("data:\n  train: {path: web, format: megatron}\n  batchsize: 8\n", "t.yaml");
  auto data = c.section("data");
  EXPECT_NE(data.get_text_or_list("train", "").find("megatron"), std::string::npos);
  data.get<int>("batch_size", 1);
  std::string message = error_of([&] { c.check_unknown_keys(); });
  EXPECT_NE(message.find("unknown key 'data.batchsize' (did you mean 'data.batch_size'?)"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("data.train."), std::string::npos) << message;
  EXPECT_EQ(message.find("read whole"), std::string::npos) << message;
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

// Issue 32: an explicit YAML tag or null is a value of that type, not the default.
TEST(Config, TaggedAndNullValuesOfTheWrongTypeNameTheKey) {
  Config c = Config::parse(
      "checkpoint:\n  every_steps: !!float 3\n  keep: !!int 2\n  every_minutes: !!int 5\n"
      "eval:\n  batch_size: ~\n  max_samples:\n  patience: !!str 3\n  shuffle: !!bool true\n"
      "optim:\n  lr: !!str 0.1\n  name: ~\n",
      "t.yaml");
  auto checkpoint = c.section("checkpoint");
  std::string m = error_of([&] { checkpoint.get<std::int64_t>("every_steps", 0); });
  EXPECT_NE(m.find("checkpoint.every_steps = !!float '3': expected an integer"), std::string::npos)
      << m;
  EXPECT_EQ(checkpoint.get<int>("keep", 0), 2);                     // !!int is an integer
  EXPECT_DOUBLE_EQ(checkpoint.get<double>("every_minutes", 0), 5);  // and a number
  auto eval = c.section("eval");
  m = error_of([&] { eval.get<std::int64_t>("batch_size", 500); });
  EXPECT_NE(m.find("eval.batch_size = null: expected an integer"), std::string::npos) << m;
  m = error_of([&] { eval.get<std::int64_t>("max_samples", 0); });  // an empty value is null
  EXPECT_NE(m.find("eval.max_samples = null: expected an integer"), std::string::npos) << m;
  m = error_of([&] { eval.get<int>("patience", 0); });
  EXPECT_NE(m.find("eval.patience = !!str '3': expected an integer"), std::string::npos) << m;
  EXPECT_TRUE(eval.get<bool>("shuffle", false));
  auto optim = c.section("optim");
  m = error_of([&] { optim.get<double>("lr", 0.1); });
  EXPECT_NE(m.find("optim.lr = !!str '0.1': expected a number"), std::string::npos) << m;
  EXPECT_EQ(optim.get<std::string>("name", "adam"), "adam");  // a string key: null is the default
  // Quoted numbers and plain ones are still numbers.
  Config q = Config::parse("data:\n  batch_size: '32'\n  prefetch: 2\n", "q.yaml");
  EXPECT_EQ(q.section("data").get<int>("batch_size", 0), 32);
  EXPECT_EQ(q.section("data").get<int>("prefetch", 0), 2);
}

TEST(Config, SyntaxErrorsGiveTheLine) {
  std::string m = error_of([] { Config::parse("optim:\n  lr: [1, 2\nrun: {}\n", "bad.yaml"); });
  EXPECT_NE(m.find("bad.yaml: YAML syntax error at line"), std::string::npos) << m;
  m = error_of([] { Config::load("/nonexistent/x.yaml"); });
  EXPECT_NE(m.find("cannot be opened"), std::string::npos) << m;
}

// Issue 18: yaml-cpp kept both entries of a repeated key and lookups found the first, while
// PyYAML (and so anyone reading the resolved config.yaml) takes the last.
TEST(Config, DuplicateKeysAndSectionsNameBothLines) {
  std::string e = error_of([] { Config::parse("optim:\n  lr: 0.001\n  lr: 0.5\n", "d.yaml"); });
  EXPECT_NE(e.find("d.yaml: key 'optim.lr' is given twice, at line 2 and at line 3"),
            std::string::npos)
      << e;
  e = error_of([] { Config::parse("optim:\n  lr: 1\nrun:\n  seed: 1\noptim:\n  lr: 2\n", "s"); });
  EXPECT_NE(e.find("section 'optim' is given twice, at line 1 and at line 5"), std::string::npos)
      << e;
  e = error_of([] { Config::parse("model:\n  block:\n    w: 1\n    w: 2\n", "n"); });
  EXPECT_NE(e.find("key 'model.block.w' is given twice"), std::string::npos) << e;
  // The same key in two different sections is fine.
  EXPECT_EQ(error_of([] { Config::parse("a:\n  lr: 1\nb:\n  lr: 2\n", "ok"); }), "");
}

// Found by the fuzz test: an alias inside its own anchor is a cycle that crashed (stack overflow).
TEST(Config, RecursiveAliasesAreRefused) {
  std::string e = error_of([] { Config::parse("parallel:\n  tp: &a [*a]\n", "r.yaml"); });
  EXPECT_NE(e.find("r.yaml: 'parallel.tp' nests deeper than 32 levels"), std::string::npos) << e;
  e = error_of([] { Config::parse("model: &m\n  block: *m\n", "m.yaml"); });
  EXPECT_NE(e.find("nests deeper than 32 levels"), std::string::npos) << e;
}

TEST(Config, TextThatIsNotUtf8IsRefusedWithTheLine) {
  const std::string e =
      error_of([] { Config::parse("run:\n  seed: 1\n  name: caf\xe9\n", "latin1.yaml"); });
  EXPECT_NE(e.find("latin1.yaml: byte 0xe9 at line 3 is not UTF-8"), std::string::npos) << e;
  EXPECT_EQ(error_of([] { Config::parse("run:\n  name: caf\xc3\xa9\n", "utf8"); }), "");
  // Overlong and truncated sequences are not UTF-8 either.
  EXPECT_NE(error_of([] { Config::parse("a: \xc0\xaf\n", "o"); }).find("not UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of([] { Config::parse("a: \xe2\x82", "t"); }).find("not UTF-8"),
            std::string::npos);
}

TEST(Config, LongValuesAreCutInMessages) {
  const std::string big(1000000, 'x');
  Config c = Config::parse("data:\n  batch_size: 1\n", "t");
  c.set("data.batch_size=" + big);
  const std::string e = error_of([&] { c.section("data").get<int>("batch_size", 0); });
  EXPECT_NE(e.find("data.batch_size = 'xxx"), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("...(1000000 characters)..."), std::string::npos);
  EXPECT_LT(e.size(), 1000u);
  EXPECT_LT(error_of([&] { c.set(big); }).size(), 1000u);
  EXPECT_EQ(clip("short", 200), "short");
  EXPECT_LE(clip(big, 200).size(), 200u + 30u);
}

TEST(Config, ANonRegularConfigFileIsRefused) {
  const std::string e = error_of([] { Config::load("/dev/null"); });
  EXPECT_NE(e.find("config file '/dev/null' is not a regular file"), std::string::npos) << e;
}

// Writes `text` to a fresh YAML file and loads it, as `hpctrain train -c` does.
Config load_text(const std::string& text) {
  std::string dir = ::testing::TempDir() + "hpctrain_config_XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + dir);
  const std::string path = dir + "/run.yaml";
  std::ofstream(path) << text;
  return Config::load(path);
}

TEST(Config, BlockListsReadFromAFileAreLists) {
  // Every list-valued key, written as YAML block lists (`- item` lines) in a real file.
  Config c = load_text(
      "model:\n  hidden:\n    - 64\n    - 32\n  channels:\n    - 8\n    - 16\n"
      "  input_shape:\n    - 1\n    - 28\n    - 28\n"
      "optim:\n  betas:\n    - 0.8\n    - 0.95\n"
      "parallel:\n  pp_layers:\n    - 3\n    - 1\n"
      "data:\n  train:\n    - {path: web/*.h5, weight: 0.7}\n    - {path: code/*.h5, weight: 0.3}\n"
      "  val:\n    - a.h5\n    - \"shard-0[0-4].h5\"\n");
  auto model = c.section("model");
  EXPECT_EQ(model.get<std::vector<std::int64_t>>("hidden", {}),
            (std::vector<std::int64_t>{64, 32}));
  EXPECT_EQ(model.get<std::vector<std::int64_t>>("channels", {}),
            (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(model.get<std::vector<std::int64_t>>("input_shape", {}),
            (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(c.section("optim").get<std::vector<double>>("betas", {}),
            (std::vector<double>{0.8, 0.95}));
  EXPECT_EQ(c.section("parallel").get<std::vector<int>>("pp_layers", {}), (std::vector<int>{3, 1}));
  // Path lists travel as one line of flow YAML (data/file_set.cpp parses it).
  auto data = c.section("data");
  EXPECT_EQ(data.get_text_or_list("train", ""),
            "[{\"path\": \"web/*.h5\", \"weight\": \"0.7\"}, "
            "{\"path\": \"code/*.h5\", \"weight\": \"0.3\"}]");
  EXPECT_EQ(data.get_text_or_list("val", ""), "[\"a.h5\", \"shard-0[0-4].h5\"]");
  EXPECT_NO_THROW(c.check_unknown_keys());
}

TEST(Config, NestedBlockMixturesReadFromAFileAreOneLine) {
  // docs/DATA.md's mixture with every source a block map, and a source with a list of paths.
  Config c = load_text(
      "data:\n  train:\n    - path: web/*.h5\n      weight: 0.7\n"
      "    - path:\n        - code/a.h5\n        - code/b.h5\n      weight: 0.3\n"
      "      name: code\n");
  const std::string text = c.section("data").get_text_or_list("train", "");
  EXPECT_EQ(text,
            "[{\"path\": \"web/*.h5\", \"weight\": \"0.7\"}, {\"path\": [\"code/a.h5\", "
            "\"code/b.h5\"], \"weight\": \"0.3\", \"name\": \"code\"}]");
  // The resolved config keeps the block form the file used.
  EXPECT_NE(c.dump().find("- path: web/*.h5"), std::string::npos) << c.dump();
}

}  // namespace
}  // namespace hpctrain
