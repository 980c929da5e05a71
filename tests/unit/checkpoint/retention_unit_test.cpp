// Retention: the newest `keep` plus the best by metric, never a protected one; across restarts
// (the metric comes from the manifests).

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint_test_util.hpp"

namespace hpctrain::checkpoint {
namespace {

std::vector<std::int64_t> steps_of(const std::vector<RetentionCandidate>& v) {
  std::vector<std::int64_t> out;
  for (const auto& c : v) out.push_back(c.step);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<RetentionCandidate> candidates(const std::vector<std::optional<double>>& metrics) {
  std::vector<RetentionCandidate> out;
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    out.push_back({"s" + std::to_string(i + 1), static_cast<std::int64_t>(i + 1), metrics[i]});
  }
  return out;
}

TEST(CheckpointRetention, KeepNewestAndBest) {
  const auto all = candidates({0.5, 0.9, 0.3, std::nullopt, 0.2, 0.1});
  RetentionPolicy higher{2, true, true};
  EXPECT_EQ(steps_of(select_for_deletion(all, higher, {})), (std::vector<std::int64_t>{1, 3, 4}));
  RetentionPolicy lower{2, true, false};
  EXPECT_EQ(steps_of(select_for_deletion(all, lower, {})), (std::vector<std::int64_t>{1, 2, 3, 4}));
  RetentionPolicy no_best{3, false, true};
  EXPECT_EQ(steps_of(select_for_deletion(all, no_best, {})), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(steps_of(select_for_deletion(all, no_best, {"s2"})), (std::vector<std::int64_t>{1, 3}));
  // Ties keep the newest of the best; non-finite metrics never count as best.
  const auto ties = candidates({0.9, 0.9, std::nan(""), 0.1, 0.1});
  EXPECT_EQ(steps_of(select_for_deletion(ties, higher, {})), (std::vector<std::int64_t>{1, 3}));
  EXPECT_TRUE(select_for_deletion(candidates({0.1}), higher, {}).empty());
}

TEST(CheckpointRetention, AppliedAfterEachSaveAndAcrossRestarts) {
  namespace fs = std::filesystem;
  const std::string run_dir = testing::make_temp_dir();
  ManagerOptions options;
  options.keep = 2;
  options.higher_is_better = true;
  options.metric_name = "accuracy";
  const std::vector<double> metrics{0.5, 0.9, 0.3, 0.4, 0.2, 0.1};
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    save_local(run_dir, testing::sample_content(static_cast<std::int64_t>(i + 1), metrics[i]),
               options);
  }
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& p : list_checkpoints(run_dir)) out.push_back(fs::path(p).filename().string());
    return out;
  };
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000006", "step_00000005", "step_00000002"}));
  EXPECT_EQ(read_manifest(run_dir + "/checkpoints/step_00000002").at("metric_name"), "accuracy");
  // A restarted run (new process, same run dir) still knows step 2 is the best.
  save_local(run_dir, testing::sample_content(7), options);
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000007", "step_00000006", "step_00000002"}));
  save_local(run_dir, testing::sample_content(8, 0.95), options);
  EXPECT_EQ(names(), (std::vector<std::string>{"step_00000008", "step_00000007"}));
  for (const auto& e : fs::directory_iterator(run_dir + "/checkpoints")) {
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  }
}

}  // namespace
}  // namespace hpctrain::checkpoint
