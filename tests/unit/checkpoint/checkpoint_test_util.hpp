#pragma once
// Helpers shared by the checkpoint unit tests: scratch run directories, error capture, and small
// checkpoints written with save_local (one process, no MPI).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "../../support/test_util.hpp"
#include "hpctrain/checkpoint/checkpoint.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::checkpoint::testing {

/// A fresh directory under the test temp dir. Local.
inline std::string make_temp_dir() {
  return hpctrain::testing::make_temp_dir("ckpt");
}

/// The message of the E that `fn` throws, or "" when it throws none. Local.
template <typename E = CheckpointError>
std::string error_of(const std::function<void()>& fn) {
  return hpctrain::testing::error_of<E>(fn);
}

/// A small checkpoint's content: model and optimizer records of several dtypes whose values
/// depend on `step`, an RNG state, a config and trainer state. Local.
inline SaveContent sample_content(std::int64_t step, std::optional<double> metric = {}) {
  SaveContent c;
  c.step = step;
  c.epoch = step / 10;
  c.consumed_samples = step * 64;
  c.trainer_state = {{"step", step}, {"note", "unit test"}};
  c.config_text = "model:\n  name: mlp\n";
  c.metric = metric;
  const double s = static_cast<double>(step);
  auto add = [&](const std::string& name, torch::Tensor t) {
    c.tensors.push_back({name, t, {t.sizes().vec(), -1}});
  };
  add("model/fc1.weight", torch::arange(64 * 33, torch::kFloat).view({64, 33}) + s);
  add("model/fc1.bias", torch::full({64}, s, torch::kFloat));
  add("model/emb.weight",
      (torch::arange(40, torch::kFloat).view({8, 5}) / 7 + s).to(torch::kBFloat16));
  add("model/head.weight",
      (torch::arange(12, torch::kFloat).view({3, 4}) / 3 - s).to(torch::kHalf));
  add("optimizer/exp_avg/fc1.weight", torch::ones({64, 33}, torch::kDouble) * s);
  add("optimizer/mask", torch::tensor({true, false, true}));
  c.tensors.push_back({"optimizer/steps", torch::tensor(step, torch::kLong), {{}, -1}});
  c.rng_state = torch::arange(16, torch::kUInt8);
  return c;
}

/// Writes `bytes` over `path` at `offset`. Local.
inline void overwrite(const std::string& path, std::streamoff offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// The file's size. Local.
inline std::uintmax_t file_size(const std::string& path) {
  return std::filesystem::file_size(path);
}

}  // namespace hpctrain::checkpoint::testing
