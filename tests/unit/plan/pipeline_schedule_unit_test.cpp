// The pipeline schedules, linked alone (no LibTorch, MPI or HDF5): for many (pp, V, micro-batch)
// shapes every schedule keeps its rules (forward before backward, every send received, no rank
// messaging itself), runs to the end with rendezvous messages (no deadlock), holds at most pp
// micro-batches of activations per rank under 1F1B, and idles exactly the share the bubble
// arithmetic predicts. The checker itself is shown to catch broken schedules, and
// docs/PIPELINE.md's timelines are the library's own output.

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "hpctrain/plan/pipeline_schedule.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::plan {
namespace {

using Kind = PipelineScheduleKind;

PipelineShape shape_of(Kind kind, int pp, int v, int m, bool forward_only = false) {
  PipelineShape s;
  s.kind = kind;
  s.pp = pp;
  s.virtual_stages = v;
  s.micro_batches = m;
  s.forward_only = forward_only;
  return s;
}

std::string describe(const PipelineShape& s) {
  return std::string(pipeline_schedule_name(s.kind)) + " pp=" + std::to_string(s.pp) +
         " V=" + std::to_string(s.virtual_stages) + " m=" + std::to_string(s.micro_batches) +
         (s.forward_only ? " forward-only" : "");
}

// Every shape the schedules accept with pp <= 8, V <= 4, m <= 24.
std::vector<PipelineShape> all_shapes() {
  std::vector<PipelineShape> shapes;
  for (Kind kind : {Kind::kGpipe, Kind::kOneFOneB, Kind::kInterleaved}) {
    for (bool forward_only : {false, true}) {
      for (int pp = 1; pp <= 8; ++pp) {
        for (int v = 1; v <= 4; ++v) {
          for (int m = 1; m <= 24; ++m) {
            const PipelineShape s = shape_of(kind, pp, v, m, forward_only);
            try {
              validate_pipeline_shape(s);
            } catch (const ConfigError&) {
              continue;
            }
            shapes.push_back(s);
          }
        }
      }
    }
  }
  return shapes;
}

TEST(PipelineSchedule, EveryShapeKeepsTheRulesAndRunsWithoutDeadlock) {
  const auto shapes = all_shapes();
  ASSERT_GT(shapes.size(), 1000u);
  for (const PipelineShape& s : shapes) {
    const PipelineSchedule schedule = make_pipeline_schedule(s);
    for (double backward : {1.0, 2.0, 3.0}) {  // any cost of backward against forward
      const PipelineSimulation sim = simulate_pipeline(schedule, 1.0, backward);
      ASSERT_TRUE(sim.deadlock_free) << describe(s) << ": " << sim.problem;
      EXPECT_TRUE(sim.problem.empty()) << describe(s);
      const double units = s.forward_only ? 1.0 : 1.0 + backward;
      for (int r = 0; r < s.pp; ++r) {
        EXPECT_DOUBLE_EQ(sim.busy[static_cast<std::size_t>(r)],
                         units * s.micro_batches * s.virtual_stages)
            << describe(s) << " rank " << r;
      }
    }
  }
}

TEST(PipelineSchedule, BubbleFractionIsTheFormula) {
  // 1F1B and GPipe: (pp - 1) / (m + pp - 1); interleaved: (pp - 1) / (V m + pp - 1), on every rank.
  for (const PipelineShape& s : all_shapes()) {
    const PipelineSimulation sim = simulate_pipeline(make_pipeline_schedule(s));
    ASSERT_TRUE(sim.deadlock_free) << describe(s) << ": " << sim.problem;
    const double expected =
        (s.pp - 1.0) / (static_cast<double>(s.virtual_stages) * s.micro_batches + s.pp - 1.0);
    EXPECT_DOUBLE_EQ(predicted_bubble_fraction(s), expected) << describe(s);
    for (int r = 0; r < s.pp; ++r) {
      EXPECT_NEAR(sim.bubble_fraction(r), expected, 1e-12) << describe(s) << " rank " << r;
    }
  }
  // The published example: 1F1B with 4 stages and 8 micro-batches idles 3/11 of the step;
  // two chunks per rank cut it to 3/19.
  EXPECT_NEAR(simulate_pipeline(make_pipeline_schedule(shape_of(Kind::kOneFOneB, 4, 1, 8)))
                  .bubble_fraction(0),
              3.0 / 11, 1e-12);
  EXPECT_NEAR(simulate_pipeline(make_pipeline_schedule(shape_of(Kind::kInterleaved, 4, 2, 8)))
                  .bubble_fraction(0),
              3.0 / 19, 1e-12);
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPpMicroBatchesOfActivations) {
  for (const PipelineShape& s : all_shapes()) {
    if (s.forward_only || s.kind == Kind::kInterleaved) continue;
    const PipelineSimulation sim = simulate_pipeline(make_pipeline_schedule(s));
    for (int r = 0; r < s.pp; ++r) {
      const int peak = sim.peak_in_flight[static_cast<std::size_t>(r)];
      if (s.kind == Kind::kOneFOneB) {
        EXPECT_LE(peak, s.pp) << describe(s) << " rank " << r;
        EXPECT_EQ(peak, std::min(s.pp - r, s.micro_batches)) << describe(s) << " rank " << r;
      } else {
        EXPECT_EQ(peak, s.micro_batches) << describe(s);  // GPipe keeps all of them
      }
    }
  }
}

TEST(PipelineSchedule, InterleavedWarmUpBoundsItsActivations) {
  // Rank r holds at most 2 (pp - r - 1) + (V - 1) pp + 1 chunk micro-batches (each 1/V of a
  // stage's activations); all m V of them when m = pp (all forwards first).
  for (const PipelineShape& s : all_shapes()) {
    if (s.forward_only || s.kind != Kind::kInterleaved) continue;
    const PipelineSimulation sim = simulate_pipeline(make_pipeline_schedule(s));
    for (int r = 0; r < s.pp; ++r) {
      const int total = s.micro_batches * s.virtual_stages;
      const int bound =
          s.micro_batches == s.pp
              ? total
              : std::min(2 * (s.pp - r - 1) + (s.virtual_stages - 1) * s.pp + 1, total);
      EXPECT_LE(sim.peak_in_flight[static_cast<std::size_t>(r)], bound) << describe(s);
    }
  }
}

TEST(PipelineSchedule, TwoStageOneFOneBReadsAsWritten) {
  const PipelineSchedule s = make_pipeline_schedule(shape_of(Kind::kOneFOneB, 2, 1, 3));
  EXPECT_EQ(format_pipeline_actions(s),
            "rank 0: F0 | send act F0 -> 1 | F1 | send act F1 -> 1 + recv grad B0 <- 1 | B0 | F2 | "
            "send act F2 -> 1 + recv grad B1 <- 1 | B1 | recv grad B2 <- 1 | B2\n"
            "rank 1: recv act F0 <- 0 | F0 | B0 | send grad B0 -> 0 + recv act F1 <- 0 | F1 | B1 | "
            "send grad B1 -> 0 + recv act F2 <- 0 | F2 | B2 | send grad B2 -> 0\n");
  // Interleaved: rank 1 sends stage 1's output back to rank 0, whose chunk 1 is stage 2.
  const PipelineSchedule i = make_pipeline_schedule(shape_of(Kind::kInterleaved, 2, 2, 2));
  ASSERT_EQ(i.ranks.size(), 2u);
  bool wraps = false;
  for (const auto& a : i.ranks[1]) {
    if (a.kind == PipelineActionKind::kSendActivation && a.chunk == 0) {
      EXPECT_EQ(a.peer, 0);
      EXPECT_EQ(a.stage, 1);
      wraps = true;
    }
  }
  EXPECT_TRUE(wraps);
}

// A schedule changed by `edit` must be refused with a problem containing `why`.
void expect_refused(const PipelineShape& shape,
                    const std::function<void(std::vector<std::vector<PipelineAction>>&)>& edit,
                    const std::string& why) {
  PipelineSchedule s = make_pipeline_schedule(shape);
  edit(s.ranks);
  const PipelineSimulation sim = simulate_pipeline(s);
  EXPECT_FALSE(sim.deadlock_free) << why;
  EXPECT_NE(sim.problem.find(why), std::string::npos) << sim.problem;
}

TEST(PipelineSchedule, TheCheckerCatchesBrokenSchedules) {
  const PipelineShape s = shape_of(Kind::kOneFOneB, 3, 1, 4);
  auto find = [](std::vector<PipelineAction>& actions, PipelineActionKind kind, int mb) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (actions[i].kind == kind && actions[i].micro_batch == mb) return i;
    }
    return actions.size();
  };
  expect_refused(
      s,
      [&](auto& ranks) {
        auto& a = ranks[1];
        std::swap(a[find(a, PipelineActionKind::kForward, 0)],
                  a[find(a, PipelineActionKind::kBackward, 0)]);
      },
      "precedes its forward");
  expect_refused(
      s,
      [&](auto& ranks) {
        auto& a = ranks[2];
        a.erase(a.begin() +
                static_cast<std::ptrdiff_t>(find(a, PipelineActionKind::kRecvActivation, 2)));
      },
      "not received");
  expect_refused(
      s,
      [&](auto& ranks) { ranks[1][find(ranks[1], PipelineActionKind::kSendGradient, 1)].peer = 1; },
      "wait on itself");
  expect_refused(
      s,
      [&](auto& ranks) {
        // Rank 0 holds back micro-batch 0's output and sends it with micro-batch 1's, after it:
        // rank 1 would take micro-batch 1's activations for micro-batch 0's.
        auto& a = ranks[0];
        PipelineAction late = a[find(a, PipelineActionKind::kSendActivation, 0)];
        a.erase(a.begin() +
                static_cast<std::ptrdiff_t>(find(a, PipelineActionKind::kSendActivation, 0)));
        late.joined = true;
        a.insert(a.begin() +
                     static_cast<std::ptrdiff_t>(find(a, PipelineActionKind::kSendActivation, 1)) +
                     1,
                 late);
      },
      "order their messages differently");
  expect_refused(
      s,
      [&](auto& ranks) {
        auto& a = ranks[1];
        a.erase(a.begin() +
                static_cast<std::ptrdiff_t>(find(a, PipelineActionKind::kSendGradient, 3)));
      },
      "not sent");
}

TEST(PipelineSchedule, ADeadlockIsNamedByWhoWaitsOnWhom) {
  // Two ranks that each receive before they send: the classic cycle.
  PipelineSchedule s = make_pipeline_schedule(shape_of(Kind::kOneFOneB, 2, 1, 1));
  auto& r0 = s.ranks[0];  // F0 | send act F0 -> 1 + recv grad B0 <- 1 | B0
  ASSERT_EQ(r0.size(), 4u);
  std::swap(r0[1], r0[2]);  // receive the gradient first, then send the activation
  r0[1].joined = false;
  r0[2].joined = false;
  const PipelineSimulation sim = simulate_pipeline(s);
  EXPECT_FALSE(sim.deadlock_free);
  EXPECT_NE(sim.problem.find("deadlock"), std::string::npos) << sim.problem;
  EXPECT_NE(sim.problem.find("rank 0 waits in 'recv grad B0 <- 1'"), std::string::npos)
      << sim.problem;
  EXPECT_NE(sim.problem.find("rank 1 waits in 'recv act F0 <- 0'"), std::string::npos)
      << sim.problem;
}

TEST(PipelineSchedule, ShapeErrorsNameTheKeyAndTheFix) {
  auto message = [](const PipelineShape& s) {
    try {
      validate_pipeline_shape(s);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(shape_of(Kind::kInterleaved, 4, 2, 6)).find("multiple of parallel.pp = 4"),
            std::string::npos);
  EXPECT_NE(message(shape_of(Kind::kInterleaved, 4, 2, 6)).find("use 8 micro-batches"),
            std::string::npos);
  EXPECT_NE(message(shape_of(Kind::kOneFOneB, 2, 2, 4)).find("parallel.pp_virtual = 2 needs"),
            std::string::npos);
  EXPECT_NE(message(shape_of(Kind::kInterleaved, 1, 2, 4)).find("needs parallel.pp >= 2"),
            std::string::npos);
  EXPECT_NE(message(shape_of(Kind::kOneFOneB, 0, 1, 4)).find("parallel.pp = 0"), std::string::npos);
  EXPECT_NE(message(shape_of(Kind::kOneFOneB, 2, 1, 0)).find("optim.grad_accumulation = 0"),
            std::string::npos);
  EXPECT_EQ(parse_pipeline_schedule("interleaved", "k"), Kind::kInterleaved);
  EXPECT_THROW(parse_pipeline_schedule("zb-v", "parallel.pp_schedule"), ConfigError);
}

// docs/PIPELINE.md draws its timelines from this library: each block opened by a line
// ```timeline <schedule> pp=P V=V m=M must hold exactly format_pipeline_timeline's output.
TEST(PipelineSchedule, TheDocsTimelinesAreTheLibrarysOutput) {
  std::ifstream in(std::string(HPCTRAIN_SOURCE_DIR) + "/docs/PIPELINE.md");
  ASSERT_TRUE(in) << "docs/PIPELINE.md not found";
  std::string line;
  int blocks = 0;
  while (std::getline(in, line)) {
    if (line.rfind("```timeline ", 0) != 0) continue;
    std::istringstream header(line.substr(12));
    std::string kind, pp, v, m;
    header >> kind >> pp >> v >> m;
    ASSERT_TRUE(pp.rfind("pp=", 0) == 0 && v.rfind("V=", 0) == 0 && m.rfind("m=", 0) == 0) << line;
    const PipelineShape s =
        shape_of(parse_pipeline_schedule(kind, "timeline"), std::stoi(pp.substr(3)),
                 std::stoi(v.substr(2)), std::stoi(m.substr(2)));
    std::string body;
    while (std::getline(in, line) && line != "```") body += line + "\n";
    EXPECT_EQ(body, format_pipeline_timeline(make_pipeline_schedule(s)))
        << "docs/PIPELINE.md's block '" << describe(s) << "' differs from the library's output";
    ++blocks;
  }
  EXPECT_GE(blocks, 3);
}

}  // namespace
}  // namespace hpctrain::plan
