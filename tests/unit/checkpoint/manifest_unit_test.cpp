// Names, tensor locations and the manifest: round trip, self-checksum, format version.

#include <gtest/gtest.h>

#include "checkpoint_test_util.hpp"

namespace hpctrain::checkpoint {
namespace {

using testing::error_of;

TEST(CheckpointNames, StepDirectories) {
  EXPECT_EQ(step_dir_name(1200), "step_00001200");
  EXPECT_EQ(step_dir_name(0), "step_00000000");
  EXPECT_EQ(step_dir_name(123456789), "step_123456789");
  EXPECT_EQ(parse_step_dir_name("step_00001200"), 1200);
  EXPECT_EQ(parse_step_dir_name("step_123456789"), 123456789);
  for (const char* bad : {"step_1200", "step_00001200.tmp-abc", "step_000001200", "latest",
                          "step_0000120x", "Step_00001200", "step_00001200/"}) {
    EXPECT_FALSE(parse_step_dir_name(bad)) << bad;
  }
}

TEST(CheckpointNames, TensorLocations) {
  auto loc = tensor_location("model/fc1.weight");
  EXPECT_EQ(loc.file, "model.h5");
  EXPECT_EQ(loc.dataset, "/fc1.weight");
  loc = tensor_location("optimizer/exp_avg/blocks.0.attn.qkv.weight");
  EXPECT_EQ(loc.file, "optimizer.h5");
  EXPECT_EQ(loc.dataset, "/exp_avg/blocks.0.attn.qkv.weight");
  EXPECT_NE(error_of([] { tensor_location("fc1.weight"); }).find("no '/'"), std::string::npos);
  EXPECT_NE(error_of([] { tensor_location("rng/cpu"); }).find("reserved"), std::string::npos);
  EXPECT_NE(error_of([] { tensor_location("model//x"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([] { tensor_location("model/../x"); }).find("'..'"), std::string::npos);
  EXPECT_NE(error_of([] { tensor_location("my.model/x"); }).find("letters, digits"),
            std::string::npos);
}

nlohmann::json sample_manifest() {
  return {{"format", kFormatName},
          {"format_version", kFormatVersion},
          {"step", 1200},
          {"epoch", 3},
          {"consumed_samples", 76800},
          {"metric", 0.1 + 0.2},
          {"world_size", 4},
          {"grid", {{"dp", 2}, {"tp", 2}}},
          {"trainer_state", {{"lr", 1e-3}, {"name", "caf\xc3\xa9"}}},
          {"files", {{"model.h5", {{"bytes", 4096u}, {"xxh3", "0123456789abcdef"}}}}},
          {"tensors",
           {{"model/fc1.weight",
             {{"file", "model.h5"},
              {"dataset", "/fc1.weight"},
              {"dtype", "float32"},
              {"shape", {256, 784}},
              {"split_dim", 0}}}}}};
}

TEST(CheckpointManifest, RoundTrip) {
  const nlohmann::json m = sample_manifest();
  const std::string text = seal_manifest(m);
  nlohmann::json parsed = parse_manifest(text, "manifest.json");
  EXPECT_EQ(parsed.at("manifest_xxh3").get<std::string>().size(), 16u);
  parsed.erase("manifest_xxh3");
  EXPECT_EQ(parsed, m);
  EXPECT_EQ(parsed.at("metric").get<double>(), 0.1 + 0.2);  // doubles survive exactly
  // Sealing again gives the same text: the checksum does not depend on the previous one.
  EXPECT_EQ(seal_manifest(parse_manifest(text, "m")), text);
}

TEST(CheckpointManifest, DetectsEditsAndDamage) {
  std::string text = seal_manifest(sample_manifest());
  std::string edited = text;
  edited.replace(edited.find("76800"), 5, "76801");
  EXPECT_NE(error_of([&] {
              parse_manifest(edited, "step_x/manifest.json");
            }).find("step_x/manifest.json: checksum mismatch"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse_manifest(text.substr(0, text.size() / 2), "m");
            }).find("not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_manifest("{\"format\": \"other\"}", "m"); }).find("\"format\""),
            std::string::npos);
  nlohmann::json newer = sample_manifest();
  newer["format_version"] = kFormatVersion + 1;
  newer["hpctrain_version"] = "9.9.9";
  const std::string message = error_of([&] { parse_manifest(seal_manifest(newer), "m"); });
  EXPECT_NE(message.find("format_version 2"), std::string::npos) << message;
  EXPECT_NE(message.find("9.9.9"), std::string::npos) << message;
  nlohmann::json no_file = sample_manifest();
  no_file["tensors"]["model/fc1.weight"]["file"] = "other.h5";
  EXPECT_NE(error_of([&] { parse_manifest(seal_manifest(no_file), "m"); }).find("other.h5"),
            std::string::npos);
}

// Issue 18: a manifest edited and resealed passes its own checksum; its schema is still checked,
// naming the field, so nothing downstream meets a null where it expects an object.
TEST(CheckpointManifest, SchemaOfAResealedManifestIsChecked) {
  auto problem = [](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json m = sample_manifest();
    edit(m);
    return error_of([&] { parse_manifest(seal_manifest(m), "m"); });
  };
  EXPECT_EQ(problem([](nlohmann::json&) {}), "");
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["trainer_state"] = nullptr;
            }).find("\"trainer_state\" should be an object"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["tensors"]["model/fc1.weight"]["dtype"] = "quaternion";
            }).find("dtype 'quaternion', which is none of the dtypes checkpoints store"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["tensors"]["model/fc1.weight"]["shape"] = {256, -1};
            }).find("shape of non-negative integers"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["tensors"]["model/fc1.weight"]["split_dim"] = 2;
            }).find("split_dim 2 outside [-1, 2)"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["files"]["../../etc/passwd"] = {{"bytes", 1u}, {"xxh3", "0123456789abcdef"}};
            }).find("should be a file name inside the checkpoint"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["rng"] = {{"ranks", 0}, {"bytes", 8}};
            }).find("\"rng\" should be null or"),
            std::string::npos);
  EXPECT_NE(problem([](nlohmann::json& m) {
              m["metric"] = "high";
            }).find("\"metric\" should be a number or null"),
            std::string::npos);
}

TEST(CheckpointManifest, ConfigHash) {
  EXPECT_EQ(xxh3_hex("model:\n  name: mlp\n"), xxh3_hex("model:\n  name: mlp\n"));
  EXPECT_NE(xxh3_hex("a"), xxh3_hex("b"));
  EXPECT_EQ(xxh3_hex("").size(), 16u);
}

}  // namespace
}  // namespace hpctrain::checkpoint
