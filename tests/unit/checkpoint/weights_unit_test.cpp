// Pretrained-weight files without MPI: safetensors written and read back for every dtype, each
// kind of damage refused with the offset or field named, and GPT-2's layouts against the gpt's
// (checkpoint/safetensors.hpp, model/gpt2_names.hpp).

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hpctrain/checkpoint/safetensors.hpp"
#include "hpctrain/checkpoint/weights_file.hpp"
#include "hpctrain/model/gpt2_names.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::checkpoint {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("hpctrain_weights_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// A file of an 8-byte length, `header` (as given, not padded) and `data` bytes.
std::string raw_file(const std::string& name, const std::string& header, std::size_t data,
                     std::uint64_t length_override = 0) {
  const std::string path = temp_path(name);
  std::ofstream f(path, std::ios::binary);
  std::uint64_t n = length_override > 0 ? length_override : header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) f.put(static_cast<char>(n & 0xff));
  f << header << std::string(data, '\0');
  return path;
}

// The message of the CheckpointError that opening `path` throws ("" when it opens).
std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryDtypeInOrder) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  const std::vector<torch::ScalarType> types{
      torch::kFloat, torch::kDouble, torch::kHalf, torch::kBFloat16, torch::kLong,
      torch::kInt,   torch::kShort,  torch::kChar, torch::kByte,     torch::kBool};
  for (std::size_t i = 0; i < types.size(); ++i) {
    torch::Tensor t = (torch::arange(12, torch::kDouble) * 0.75 - 3).view({3, 4});
    if (types[i] == torch::kBool) t = t.gt(0);
    tensors.emplace_back("t" + std::to_string(i), t.to(types[i]));
  }
  tensors.emplace_back("empty", torch::zeros({0, 5}));
  tensors.emplace_back("scalar", torch::full({}, 2.5));
  tensors.emplace_back("transposed", torch::arange(6, torch::kFloat).view({2, 3}).t());
  const std::string path = temp_path("all.safetensors");
  write_safetensors(path, tensors, {{"format", "pt"}});
  const SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_EQ(file.entries().size(), tensors.size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const SafetensorsEntry& e = file.entries()[i];  // data order = the order written
    EXPECT_EQ(e.name, tensors[i].first);
    const torch::Tensor back = file.read(e);
    EXPECT_EQ(back.scalar_type(), tensors[i].second.scalar_type()) << e.name;
    EXPECT_TRUE(torch::equal(back, tensors[i].second)) << e.name;
  }
  EXPECT_EQ(file.find("t2")->dtype, "F16");
  EXPECT_EQ(file.find("t3")->dtype, "BF16");
  // The data section starts 8-byte aligned.
  EXPECT_EQ(file.entries().front().begin % 8, 0u);
}

TEST(Safetensors, RefusesEachDamageNamingWhere) {
  // A valid two-tensor file: a F32 [2] at [0, 8) and a F32 [1] at [8, 12).
  const std::string good =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},"__metadata__":{"k":"v"}})";
  EXPECT_EQ(open_error(raw_file("good.safetensors", good, 12)), "");

  // Truncated: the last tensor runs past the end.
  std::string e = open_error(raw_file("truncated.safetensors", good, 10));
  EXPECT_NE(e.find("header entry 'b': field 'data_offsets' [8, 12] reaches file byte"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("the file is truncated"), std::string::npos) << e;

  // Header length past the end of the file.
  e = open_error(raw_file("long.safetensors", good, 12, 100000));
  EXPECT_NE(e.find("the header length at bytes 0-7 is 100000 bytes, past the end of the file"),
            std::string::npos)
      << e;

  // Shorter than the length field itself.
  {
    const std::string path = temp_path("tiny.safetensors");
    std::ofstream(path, std::ios::binary) << "abc";
    e = open_error(path);
    EXPECT_NE(e.find("3 bytes long, shorter than the 8-byte header length"), std::string::npos)
        << e;
  }

  // Overlapping offsets.
  const std::string overlap = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  e = open_error(raw_file("overlap.safetensors", overlap, 12));
  EXPECT_NE(e.find("header entry 'b': field 'data_offsets' [4, 12] overlaps 'a' [0, 8]"),
            std::string::npos)
      << e;

  // A gap, and bytes after the last tensor.
  const std::string gap = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  e = open_error(raw_file("gap.safetensors", gap, 12));
  EXPECT_NE(e.find("leaves file bytes"), std::string::npos) << e;
  e = open_error(raw_file("tail.safetensors", good, 16));
  EXPECT_NE(e.find("after the last tensor belong to no tensor"), std::string::npos) << e;

  // Bad and unsupported dtypes.
  const std::string bad_dtype = R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})";
  e = open_error(raw_file("dtype.safetensors", bad_dtype, 4));
  EXPECT_NE(e.find("header entry 'a': field 'dtype' is 'F33', not a safetensors dtype"),
            std::string::npos)
      << e;
  const std::string u16 = R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})";
  e = open_error(raw_file("u16.safetensors", u16, 4));
  EXPECT_NE(e.find("dtype U16 has no LibTorch type"), std::string::npos) << e;

  // Byte count that does not match the shape.
  const std::string size = R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})";
  e = open_error(raw_file("size.safetensors", size, 8));
  EXPECT_NE(e.find("shape (3,) of F32 needs 12 bytes"), std::string::npos) << e;

  // Not JSON, not an object, a bad field.
  e = open_error(raw_file("json.safetensors", R"({"a": {"dtype": )", 0));
  EXPECT_NE(e.find("is not valid JSON near byte"), std::string::npos) << e;
  e = open_error(raw_file("shape.safetensors",
                          R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4));
  EXPECT_NE(e.find("field 'shape' holds -1"), std::string::npos) << e;
  e = open_error(raw_file("meta.safetensors", R"({"__metadata__":{"k":1}})", 0));
  EXPECT_NE(e.find("'__metadata__' maps 'k' to a non-string value"), std::string::npos) << e;
}

TEST(Safetensors, FifoIsRefusedWithoutBlocking) {
  const std::string path = temp_path("fifo.safetensors");
  ::unlink(path.c_str());
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  const std::string e = open_error(path);  // would block forever if it opened the FIFO
  EXPECT_NE(e.find("FIFO"), std::string::npos) << e;
  try {
    WeightsFile::open(path);
    ADD_FAILURE() << "a FIFO opened as weights";
  } catch (const CheckpointError& err) {
    EXPECT_NE(std::string(err.what()).find("FIFO"), std::string::npos) << err.what();
  }
}

TEST(Gpt2Names, ConvOneDLayoutsMatchTheGptParameters) {
  using model::Gpt2Layout;
  const std::int64_t d = 4, f = 6;
  // c_attn: out index j*D + o (q, k, v; heads in order), weight [in, out].
  torch::Tensor c_attn = torch::arange(d * 3 * d, torch::kFloat).view({d, 3 * d});
  torch::Tensor qkv = model::from_gpt2(c_attn, Gpt2Layout::kQkvWeight, /*conv1d=*/true);
  ASSERT_EQ(qkv.sizes().vec(), (std::vector<std::int64_t>{3, d, d}));
  for (std::int64_t j = 0; j < 3; ++j) {
    for (std::int64_t o = 0; o < d; ++o) {
      for (std::int64_t i = 0; i < d; ++i) {
        ASSERT_EQ(qkv[j][o][i].item<float>(), c_attn[i][j * d + o].item<float>());
      }
    }
  }
  EXPECT_TRUE(torch::equal(model::to_gpt2(qkv, Gpt2Layout::kQkvWeight), c_attn));
  // The same weights stored as nn.Linear ([3D, D]) give the same qkv.
  EXPECT_TRUE(torch::equal(model::from_gpt2(c_attn.t().contiguous(), Gpt2Layout::kQkvWeight,
                                            /*conv1d=*/false),
                           qkv));
  // A square Conv1D weight (attn.c_proj) is transposed too: its shape cannot tell.
  torch::Tensor c_proj = torch::randn({d, d});
  EXPECT_TRUE(torch::equal(model::from_gpt2(c_proj, Gpt2Layout::kLinear, true), c_proj.t()));
  EXPECT_TRUE(torch::equal(model::from_gpt2(c_proj, Gpt2Layout::kLinear, false), c_proj));
  torch::Tensor c_fc = torch::randn({d, f});
  torch::Tensor fc = model::from_gpt2(c_fc, Gpt2Layout::kLinear, true);
  EXPECT_TRUE(torch::equal(fc, c_fc.t()));
  EXPECT_TRUE(torch::equal(model::to_gpt2(fc, Gpt2Layout::kLinear), c_fc));
  EXPECT_EQ(model::gpt2_shape({f, d}, Gpt2Layout::kLinear, true),
            (std::vector<std::int64_t>{d, f}));
  EXPECT_EQ(model::gpt2_shape({3, d, d}, Gpt2Layout::kQkvWeight, true),
            (std::vector<std::int64_t>{d, 3 * d}));
  EXPECT_EQ(model::gpt2_shape({3, d}, Gpt2Layout::kQkvBias, true),
            (std::vector<std::int64_t>{3 * d}));
  torch::Tensor bias = torch::arange(3 * d, torch::kFloat);
  EXPECT_TRUE(torch::equal(model::from_gpt2(bias, Gpt2Layout::kQkvBias, true)[1][2], bias[d + 2]));

  model::GptOptions o;
  o.layers = 2;
  const auto tied = model::gpt2_tensors(o);
  EXPECT_EQ(tied.size(), 2u + 12u * 2u + 2u);  // no lm_head.weight when tied
  EXPECT_EQ(tied[2].gpt2_name, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(tied[2].name, "blocks.0.ln1.weight");
  o.tied_embeddings = false;
  EXPECT_EQ(model::gpt2_tensors(o).back().gpt2_name, "lm_head.weight");
  EXPECT_TRUE(model::is_gpt2_name("h.11.mlp.c_fc.bias"));
  EXPECT_TRUE(model::is_gpt2_name("transformer.wte.weight"));
  EXPECT_FALSE(model::is_gpt2_name("wte.weight"));
  EXPECT_FALSE(model::is_gpt2_name("blocks.0.attn.qkv.weight"));
  EXPECT_TRUE(model::is_gpt2_mask_buffer("transformer.h.3.attn.masked_bias"));
  EXPECT_FALSE(model::is_gpt2_mask_buffer("transformer.h.3.attn.c_attn.bias"));
}

}  // namespace
}  // namespace hpctrain::checkpoint
