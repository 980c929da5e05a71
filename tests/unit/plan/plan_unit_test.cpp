// The arithmetic of hpctrain plan, linked alone (no LibTorch, MPI or HDF5): published figures
// (GPT-3's 3.15e23 training FLOPs), the trainer's step and evaluation counts, checkpoint sizes,
// the Young/Daly interval, and calibration from a ledger. plan_model_unit_test compares the FLOP
// counts with the models the trainer builds.

#include <gtest/gtest.h>

#include <cmath>

#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/layout_search.hpp"
#include "hpctrain/plan/memory_plan.hpp"
#include "hpctrain/plan/size_arguments.hpp"
#include "hpctrain/runtime/error.hpp"

namespace hpctrain::plan {
namespace {

// A transformer given by size arguments as `hpctrain plan --params N --tokens D` sets it up: a
// sample is a token, forward 2 N FLOPs.
PlanInputs transformer_inputs(double params, double tokens) {
  PlanInputs in;
  in.model_name = "transformer";
  in.task = Task::kLanguageModel;
  in.parameters = params;
  in.non_embedding_parameters = params;
  in.forward_flops_per_sample = 2.0 * params;
  in.samples_per_epoch = tokens;
  in.train_samples = tokens;
  return in;
}

TEST(PlanFlops, Gpt3TrainingFlopsAre6ND) {
  // Brown et al. 2020: 175e9 parameters, 300e9 training tokens: 6 x 175e9 x 300e9 = 3.15e23.
  EXPECT_DOUBLE_EQ(transformer_training_flops(175e9, 300e9), 3.15e23);
  const ComputePlan plan = make_plan(transformer_inputs(175e9, 300e9));
  EXPECT_DOUBLE_EQ(plan.train_flops, 3.15e23);
  EXPECT_DOUBLE_EQ(plan.train_tokens, 300e9);
  EXPECT_FALSE(plan.timed);  // no peak, no calibration: no times, and a note says why
  ASSERT_FALSE(plan.notes.empty());
  EXPECT_NE(plan.notes[0].find("--peak-flops"), std::string::npos);
  auto j = plan_to_json(plan);
  EXPECT_DOUBLE_EQ(j["flops"]["train"].get<double>(), 3.15e23);
  EXPECT_TRUE(j["time"]["train_wall_s"].is_null());
}

TEST(PlanFlops, EvaluationIs2NDPerPass) {
  EXPECT_DOUBLE_EQ(transformer_eval_flops(175e9, 1e9), 3.5e20);
  PlanInputs in = transformer_inputs(1e9, 20e9);
  in.eval_samples_per_pass = 5e6;  // tokens
  in.eval_passes = 4;
  const ComputePlan plan = make_plan(in);
  EXPECT_DOUBLE_EQ(plan.eval_flops_per_pass, 2 * 1e9 * 5e6);
  EXPECT_DOUBLE_EQ(plan.eval_flops, 4 * 2 * 1e9 * 5e6);
  // Per token, training costs 3 evaluations.
  EXPECT_DOUBLE_EQ(plan.train_flops / 20e9, 3 * plan.eval_flops_per_pass / 5e6);
}

TEST(PlanFlops, WallTimeAndDeviceHoursAtPeakTimesUtilization) {
  PlanInputs in = transformer_inputs(175e9, 300e9);
  in.devices = 1024;
  in.peak_flops_per_device = parse_peak_flops("a100-sxm-bf16", "--peak-flops");
  in.utilization = 0.5;
  in.eval_samples_per_pass = 1e9;
  in.eval_passes = 2;
  const ComputePlan plan = make_plan(in);
  ASSERT_TRUE(plan.timed);
  EXPECT_EQ(plan.rate_source, "peak x utilization");
  const double wall = 3.15e23 / (1024 * 312e12 * 0.5);
  EXPECT_NEAR(plan.train_wall_s, wall, 1e-9 * wall);
  EXPECT_NEAR(plan.train_device_hours, wall * 1024 / 3600, 1e-9 * wall);
  const double eval_pass = 2 * 175e9 * 1e9 / (1024 * 312e12 * 0.5);
  EXPECT_NEAR(plan.eval_wall_per_pass_s, eval_pass, 1e-9 * eval_pass);
  EXPECT_NEAR(plan.total_wall_s, wall + 2 * eval_pass, 1e-9 * wall);
  EXPECT_DOUBLE_EQ(plan.overhead_s, 0);
}

TEST(PlanWork, StepsAndEvaluationsAsTheTrainerCountsThem) {
  EXPECT_EQ(planned_steps(60000, 128, 1, 0), 468);  // the remainder of an epoch is dropped
  EXPECT_EQ(planned_steps(60000, 128, 2, 0), 936);
  EXPECT_EQ(planned_steps(60000, 128, 2, 600), 600);
  EXPECT_EQ(planned_steps(60000, 128, 1, 600), 468);
  EXPECT_EQ(planned_steps(100, 128, 1, 0), 0);
  EXPECT_EQ(planned_evaluations(600, 200, true), 3);  // 200, 400, 600 (= the end)
  EXPECT_EQ(planned_evaluations(650, 200, true), 4);  // ... and 650
  EXPECT_EQ(planned_evaluations(650, 200, false), 3);
  EXPECT_EQ(planned_evaluations(650, 0, true), 1);
  EXPECT_EQ(planned_evaluations(650, 0, false), 0);
  EXPECT_EQ(planned_evaluations(0, 200, true), 0);
}

TEST(PlanCheckpoint, SizeFromOptimizerState) {
  EXPECT_DOUBLE_EQ(optimizer_state_bytes_per_parameter("sgd"), 0);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes_per_parameter("sgd-momentum"), 4);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes_per_parameter("adam"), 8);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes_per_parameter("adamw"), 8);
  EXPECT_THROW(optimizer_state_bytes_per_parameter("lamb"), ConfigError);

  PlanInputs in = transformer_inputs(175e9, 300e9);
  in.checkpoint_bandwidth = 10e9;
  const ComputePlan adam = make_plan(in);
  EXPECT_DOUBLE_EQ(adam.checkpoint_bytes, 175e9 * 12);  // 2.1 TB
  EXPECT_DOUBLE_EQ(adam.checkpoint_write_s, 210);
  in.optimizer = "sgd";
  EXPECT_DOUBLE_EQ(make_plan(in).checkpoint_bytes, 175e9 * 4);
}

TEST(PlanCheckpoint, YoungDalyInterval) {
  // 60 s to save, a failure every 24 h: sqrt(2 x 60 x 86400) = 3219.9 s.
  const CheckpointInterval c = young_daly(60, 86400);
  EXPECT_NEAR(c.interval_s, std::sqrt(2.0 * 60 * 86400), 1e-9);
  EXPECT_NEAR(c.interval_s, 3219.94, 0.01);
  // At the optimum, saving and redoing work cost the same, together sqrt(2 save / MTBF).
  EXPECT_NEAR(c.save_fraction, c.rework_fraction, 1e-12);
  EXPECT_NEAR(c.waste_fraction, std::sqrt(2.0 * 60 / 86400), 1e-12);
  // It is the minimum of save/tau + tau/(2 MTBF).
  auto waste = [](double tau) { return 60 / tau + tau / (2 * 86400.0); };
  EXPECT_LT(waste(c.interval_s), waste(0.9 * c.interval_s));
  EXPECT_LT(waste(c.interval_s), waste(1.1 * c.interval_s));
  EXPECT_THROW(young_daly(0, 86400), ConfigError);
  EXPECT_THROW(young_daly(60, 0), ConfigError);

  PlanInputs in = transformer_inputs(1e9, 1e12);
  in.steps = 1000;
  in.peak_flops_per_device = 1e15;
  in.devices = 8;
  in.checkpoint_bandwidth = 1e9;  // 12 GB: 12 s
  in.mtbf_s = 6 * 3600;
  const ComputePlan plan = make_plan(in);
  ASSERT_TRUE(plan.interval.has_value());
  EXPECT_NEAR(plan.interval->interval_s, std::sqrt(2.0 * 12 * 6 * 3600), 1e-9);
  EXPECT_NEAR(plan.interval_steps, plan.interval->interval_s / plan.step_s, 1e-9);
  EXPECT_NEAR(plan.expected_failures, plan.total_wall_s / (6 * 3600), 1e-12);
}

TEST(PlanDevices, PeakFlopsPresetsAndNumbers) {
  EXPECT_DOUBLE_EQ(parse_peak_flops("h200-sxm-bf16", "--peak-flops"), 989e12);
  EXPECT_DOUBLE_EQ(parse_peak_flops("H100-SXM-BF16", "--peak-flops"), 989e12);
  EXPECT_DOUBLE_EQ(parse_peak_flops("989e12", "--peak-flops"), 989e12);
  for (const char* bad : {"fast", "", "-1", "0", "1e12x"}) {
    try {
      parse_peak_flops(bad, "--peak-flops");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("h200-sxm-bf16"), std::string::npos) << e.what();
    }
  }
}

TEST(PlanDevices, BadInputsAreConfigErrors) {
  PlanInputs in = transformer_inputs(1e9, 1e9);
  in.utilization = 1.5;
  EXPECT_THROW(make_plan(in), ConfigError);
  in.utilization = 0.4;
  in.devices = 0;
  EXPECT_THROW(make_plan(in), ConfigError);
  in.devices = 1;
  in.train_samples = 0;
  EXPECT_THROW(make_plan(in), ConfigError);
}

// A ledger as hpctrain train writes it (src/train/ledger.cpp), trimmed to what plan reads.
nlohmann::json ledger_json() {
  return nlohmann::json::parse(R"({
    "model": {"name": "mlp", "task": "classification", "parameters": 247766},
    "grid": {"world_size": 2, "dp": 2, "tp": 1, "threads_per_rank": 1, "device": "cpu"},
    "steps": 300, "samples_trained": 38400, "samples_evaluated": 2000,
    "rank_seconds": {"eval": 0.6, "checkpoint": 0.0, "train_loop": 8.0, "total": 10.0},
    "wall_seconds": {"train_loop": 4.0, "eval": 0.3, "total": 5.0},
    "flops": {"forward_per_sample": 495038.0, "train_per_sample": 1485114.0,
              "eval_per_sample": 495038.0, "train_total": 57028377600.0,
              "eval_total": 990076000.0},
    "cost_ratio_train_to_eval": {"flops": 3.0, "measured": 4.9}
  })");
}

TEST(PlanCalibration, MeasuredRatesReplaceTheAssumedOnes) {
  const LedgerCalibration c = read_ledger_calibration(ledger_json(), "run/ledger.json");
  EXPECT_EQ(c.world_size, 2);
  EXPECT_EQ(c.steps, 300);
  EXPECT_DOUBLE_EQ(c.train_flops_per_s_per_device, 57028377600.0 / 4.0 / 2);
  EXPECT_DOUBLE_EQ(c.eval_wall_s, 0.3);  // eval rank-seconds / ranks
  EXPECT_DOUBLE_EQ(c.eval_flops_per_s_per_device, 990076000.0 / 0.3 / 2);
  EXPECT_NEAR(c.overhead_s, 5.0 - 4.0 - 0.3, 1e-12);

  // The same model for twice the steps: twice the training time, the same overhead.
  PlanInputs in;
  in.model_name = "mlp";
  in.parameters = 247766;
  in.forward_flops_per_sample = 495038;
  in.steps = 600;
  in.train_samples = 76800;
  in.eval_samples_per_pass = 2000;
  in.eval_passes = 1;
  in.devices = 2;
  in.peak_flops_per_device = 1e10;
  in.calibration = c;
  const ComputePlan plan = make_plan(in);
  EXPECT_EQ(plan.rate_source, "calibrated");
  EXPECT_NEAR(plan.train_wall_s, 8.0, 1e-9);
  EXPECT_NEAR(plan.eval_wall_s, 0.3, 1e-9);
  EXPECT_NEAR(plan.total_wall_s, 8.0 + 0.3 + 0.7, 1e-9);
  EXPECT_NEAR(plan.step_s, 8.0 / 600, 1e-12);
  EXPECT_NEAR(plan.utilization, 57028377600.0 / 4.0 / 2 / 1e10, 1e-12);  // measured MFU
  EXPECT_TRUE(plan.notes.empty());

  // On 4 devices it assumes perfect scaling, and says so.
  in.devices = 4;
  const ComputePlan four = make_plan(in);
  EXPECT_NEAR(four.train_wall_s, 4.0, 1e-9);
  ASSERT_EQ(four.notes.size(), 1u);
  EXPECT_NE(four.notes[0].find("perfect scaling"), std::string::npos);
}

TEST(PlanCalibration, LedgerProblemsNameTheField) {
  auto j = ledger_json();
  j["wall_seconds"].erase("train_loop");
  try {
    read_ledger_calibration(j, "run/ledger.json");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("run/ledger.json: no field 'wall_seconds.train_loop'"),
              std::string::npos)
        << e.what();
  }
  j = ledger_json();
  j["steps"] = "many";
  EXPECT_THROW(read_ledger_calibration(j, "run/ledger.json"), ConfigError);
  j = ledger_json();
  j["steps"] = 0;
  EXPECT_THROW(read_ledger_calibration(j, "run/ledger.json"), ConfigError);
}

TEST(PlanMemory, BytesPerParameterFollowMegatronsTable) {
  // Megatron-LM's distributed optimizer: float32 weights and gradients with Adam, 16 B unsharded
  // and 8 + 8 / dp sharded; bf16 weights with float32 gradients and master weights, 18 vs
  // 6 + 12 / dp.
  for (int dp : {1, 2, 4, 8}) {
    EXPECT_DOUBLE_EQ(parameter_bytes(WeightLayout::kFloat32, "adam", dp, false).total(), 16);
    EXPECT_DOUBLE_EQ(parameter_bytes(WeightLayout::kFloat32, "adamw", dp, true).total(),
                     8 + 8.0 / dp);
    EXPECT_DOUBLE_EQ(
        parameter_bytes(WeightLayout::kBf16WithFloat32Master, "adam", dp, false).total(), 18);
    EXPECT_DOUBLE_EQ(
        parameter_bytes(WeightLayout::kBf16WithFloat32Master, "adam", dp, true).total(),
        6 + 12.0 / dp);
  }
  EXPECT_DOUBLE_EQ(parameter_bytes(WeightLayout::kFloat32, "sgd-momentum", 4, true).total(), 9);
  EXPECT_DOUBLE_EQ(parameter_bytes(WeightLayout::kFloat32, "sgd", 4, true).total(), 8);
  EXPECT_THROW(parameter_bytes(WeightLayout::kFloat32, "adam", 0, true), ConfigError);
  EXPECT_THROW(parameter_bytes(WeightLayout::kFloat32, "lamb", 2, true), ConfigError);
}

TEST(PlanMemory, ActivationsShrinkWithRecomputationAndTensorParallelism) {
  TransformerShape s;
  s.layers = 12;
  s.width = 768;
  s.seq_len = 1024;
  s.vocab_size = 50304;
  const auto none = gpt_activation_bytes(s, 12, 8, 1, 4, false, RecomputeMode::kNone);
  // Per token per layer: 16 D values (F = 4 D) and H x T probabilities, float32.
  EXPECT_DOUBLE_EQ(none.per_layer, 8.0 * 1024 * (16.0 * 768 + 12.0 * 1024) * 4);
  EXPECT_DOUBLE_EQ(none.layers, 12 * none.per_layer);
  const auto block = gpt_activation_bytes(s, 12, 8, 1, 4, false, RecomputeMode::kBlock);
  EXPECT_DOUBLE_EQ(block.per_layer, 8.0 * 1024 * 768 * 4);
  EXPECT_DOUBLE_EQ(block.layers, 12 * block.per_layer + none.per_layer);
  const auto attention = gpt_activation_bytes(s, 12, 8, 1, 4, false, RecomputeMode::kAttention);
  EXPECT_DOUBLE_EQ(attention.per_layer, 8.0 * 1024 * 16.0 * 768 * 4);
  EXPECT_LT(block.total(), attention.total());
  EXPECT_LT(attention.total(), none.total());
  EXPECT_DOUBLE_EQ(none.head, 8.0 * 1024 * (3 * 768 * 4 + 2 * 50304.0 * 4));
  // Dropout adds the dropped probabilities and one-byte masks; tp splits the sharded part.
  EXPECT_GT(gpt_activation_bytes(s, 12, 8, 1, 4, true, RecomputeMode::kNone).per_layer,
            none.per_layer);
  EXPECT_LT(gpt_activation_bytes(s, 12, 8, 2, 4, false, RecomputeMode::kNone).per_layer,
            none.per_layer);
  EXPECT_THROW(gpt_activation_bytes(s, 12, 0, 1, 4, false, RecomputeMode::kNone), ConfigError);
  // On a CPU a dropout mask element is as large as the activation's (LibTorch keeps the scaled
  // noise tensor), on a GPU one byte (the fused kernel's bool mask): three bytes more per element
  // of the probabilities' mask and of the two residual masks.
  const auto gpu_dropout = gpt_activation_bytes(s, 12, 8, 1, 4, true, RecomputeMode::kNone);
  const auto cpu_dropout =
      gpt_activation_bytes(s, 12, 8, 1, 4, true, RecomputeMode::kNone, kCpuDropoutMask);
  EXPECT_DOUBLE_EQ(cpu_dropout.per_layer - gpu_dropout.per_layer,
                   8.0 * 1024 * (12.0 * 1024 + 2 * 768) * 3);
  // recompute=attention drops the probabilities' mask with them.
  EXPECT_DOUBLE_EQ(
      gpt_activation_bytes(s, 12, 8, 1, 4, true, RecomputeMode::kAttention, kCpuDropoutMask)
              .per_layer -
          gpt_activation_bytes(s, 12, 8, 1, 4, true, RecomputeMode::kAttention).per_layer,
      8.0 * 1024 * 2 * 768 * 3);
  // A block's dense activations and probabilities (masks left out), whatever the mode keeps.
  const double dense = 8.0 * 1024 * 16 * 768 * 4, probabilities = 8.0 * 1024 * 12 * 1024 * 4;
  for (const auto* a : {&none, &block, &attention}) {
    EXPECT_DOUBLE_EQ(a->dense, dense);
    EXPECT_DOUBLE_EQ(a->probabilities, probabilities);
  }
  EXPECT_DOUBLE_EQ(cpu_dropout.dense, dense);
  EXPECT_DOUBLE_EQ(cpu_dropout.probabilities, 2 * probabilities);  // and the dropped copy
  // Heap slack on a CPU host: one block's dense activations, a share of every block's
  // probabilities and about 1.5 times the weights, with the fitted coefficients of each mode.
  const double weights = 4.0 * 124e6;
  EXPECT_DOUBLE_EQ(gpt_heap_slack_bytes(none, 12, RecomputeMode::kNone, weights),
                   dense + 0.35 * 12 * probabilities + 1.5 * weights);
  EXPECT_DOUBLE_EQ(gpt_heap_slack_bytes(block, 12, RecomputeMode::kBlock, weights),
                   1.4 * dense + 0.45 * 12 * probabilities + 1.5 * weights);
  EXPECT_DOUBLE_EQ(gpt_heap_slack_bytes(none, 12, RecomputeMode::kAttention, weights),
                   0.9 * dense + 1.2 * 12 * probabilities + 1.4 * weights);
}

// The message of the ConfigError `call` throws, or "no error".
template <class Call>
std::string config_error_of(Call&& call) {
  try {
    call();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PlanMemory, DeviceMemorySizesParse) {
  EXPECT_DOUBLE_EQ(parse_bytes("80GiB", "--device-memory"), 80.0 * (1ull << 30));
  EXPECT_DOUBLE_EQ(parse_bytes("141 GB", "--device-memory"), 141e9);
  EXPECT_DOUBLE_EQ(parse_bytes("1.5e9", "--device-memory"), 1.5e9);
  for (const char* bad : {"", "80 gallons", "-1GiB", "GiB"}) {
    EXPECT_NE(config_error_of([&] { parse_bytes(bad, "--device-memory"); }).find("--device-memory"),
              std::string::npos)
        << bad;
  }
}

TEST(PlanMemory, MemoryPlanAddsStateActivationsAndHostMemory) {
  MemoryInputs m;
  m.dp = 4;
  m.shard = true;
  m.parameters_per_device = 1e6;
  // Without a gpt there is no activation estimate: the state alone.
  MemoryPlan p = make_memory_plan(m, "adam", 0, 0);
  EXPECT_DOUBLE_EQ(p.state_bytes, 1e6 * (8 + 8.0 / 4));
  EXPECT_DOUBLE_EQ(p.other.total(), 16);  // unsharded, for comparison
  EXPECT_DOUBLE_EQ(p.run_activation_bytes, 0);
  EXPECT_DOUBLE_EQ(p.total_bytes, p.state_bytes);
  EXPECT_DOUBLE_EQ(p.host.process_base, kDefaultProcessBaseBytes);
  EXPECT_DOUBLE_EQ(p.host.heap_slack, 0);
  auto j = memory_plan_to_json(p);
  EXPECT_FALSE(j.contains("activation_bytes"));
  EXPECT_FALSE(j.contains("fits"));
  EXPECT_EQ(j["bytes_per_parameter"]["unsharded"], 16);
  EXPECT_EQ(j["host"]["process_base"], "default (measured on Debian 12)");

  // A gpt: this run's activations are the recompute mode it uses; the heap slack follows it.
  m.decoder = true;
  m.shape = TransformerShape{12, 768, 1024, 50304, 4.0, true};
  m.heads = 12;
  m.micro_batch = 8;
  m.recompute = RecomputeMode::kBlock;
  p = make_memory_plan(m, "adam", 80.0 * (1ull << 30), 300e6);
  const auto block = gpt_activation_bytes(m.shape, 12, 8, 1, 4, false, RecomputeMode::kBlock);
  const auto none = gpt_activation_bytes(m.shape, 12, 8, 1, 4, false, RecomputeMode::kNone);
  EXPECT_DOUBLE_EQ(p.run_activation_bytes, block.total());
  EXPECT_DOUBLE_EQ(p.total_bytes, p.state_bytes + block.total());
  EXPECT_DOUBLE_EQ(p.host.heap_slack,
                   gpt_heap_slack_bytes(none, 12, RecomputeMode::kBlock, 1e6 * 4));
  EXPECT_DOUBLE_EQ(p.host.peak_rss(), p.total_bytes + p.host.heap_slack + 300e6);
  EXPECT_TRUE(p.fits());
  j = memory_plan_to_json(p);
  EXPECT_EQ(j["recompute"], "block");
  EXPECT_DOUBLE_EQ(j["activation_bytes"]["none"].get<double>(), none.total());
  EXPECT_DOUBLE_EQ(
      j["activation_bytes"]["attention"].get<double>(),
      gpt_activation_bytes(m.shape, 12, 8, 1, 4, false, RecomputeMode::kAttention).total());
  EXPECT_EQ(j["host"]["process_base"], "--host-base");
  EXPECT_EQ(j["fits"], true);
  // bf16 halves the activations' elements; a small device does not hold the run.
  m.precision = Precision::kBf16;
  p = make_memory_plan(m, "adam", 1e9, 0);
  EXPECT_DOUBLE_EQ(
      p.run_activation_bytes,
      gpt_activation_bytes(m.shape, 12, 8, 1, 2, false, RecomputeMode::kBlock).total());
  EXPECT_FALSE(p.fits());
  EXPECT_THROW(make_memory_plan(m, "lamb", 0, 0), ConfigError);
}

TEST(PlanSizes, TransformerSizesGiveTheModelWorkAndMemory) {
  SizeArguments a;
  a.layers = 12;
  a.width = 768;
  a.seq_len = 1024;
  a.vocab = 50304;
  a.tokens = 10 * 1024;
  a.eval_tokens = 2 * 1024;
  a.heads = 12;
  a.micro_batch = 8;
  a.shard_optimizer = true;
  EXPECT_TRUE(has_model_size(a));
  MemoryInputs m;
  const PlanInputs in = inputs_from_sizes(a, 4, m);
  const TransformerShape shape{12, 768, 1024, 50304, 4.0, true};
  const double n = transformer_non_embedding_parameters(shape);
  EXPECT_DOUBLE_EQ(in.non_embedding_parameters, n);
  EXPECT_DOUBLE_EQ(in.parameters, n + transformer_embedding_parameters(shape));
  EXPECT_DOUBLE_EQ(in.tokens_per_sample, 1024);  // a sample is a sequence
  EXPECT_DOUBLE_EQ(in.samples_per_epoch, 10);
  EXPECT_DOUBLE_EQ(in.eval_samples_per_pass, 2);
  EXPECT_DOUBLE_EQ(in.eval_passes, 1);
  EXPECT_DOUBLE_EQ(in.forward_flops_per_sample,
                   1024 * (transformer_forward_flops_per_token(n, 12, 1024, 768) +
                           transformer_head_flops_per_token(768, 50304)));
  EXPECT_DOUBLE_EQ(transformer_head_flops_per_token(768, 50304), 2.0 * 768 * 50304);
  EXPECT_EQ(in.optimizer, "adam");
  EXPECT_EQ(m.dp, 4);
  EXPECT_TRUE(m.shard);
  EXPECT_TRUE(m.decoder);
  EXPECT_EQ(m.heads, 12);

  // --params N --tokens D alone: a sample is a token of 2 N forward FLOPs, no activations.
  SizeArguments p;
  p.params = 175e9;
  p.tokens = 300e9;
  MemoryInputs pm;
  const PlanInputs gpt3 = inputs_from_sizes(p, 1, pm);
  EXPECT_DOUBLE_EQ(gpt3.forward_flops_per_sample, 2 * 175e9);
  EXPECT_DOUBLE_EQ(gpt3.train_samples, 300e9);
  EXPECT_FALSE(pm.decoder);

  // Missing pieces are ConfigErrors naming the argument.
  auto message = [](const SizeArguments& bad) {
    MemoryInputs unused;
    return config_error_of([&] { inputs_from_sizes(bad, 1, unused); });
  };
  SizeArguments no_tokens;
  no_tokens.params = 1e6;
  EXPECT_NE(message(no_tokens).find("--tokens"), std::string::npos);
  SizeArguments half;
  half.layers = 2;
  half.tokens = 100;
  EXPECT_NE(message(half).find("--width"), std::string::npos);
  SizeArguments flops;
  flops.forward_flops = 1e6;
  EXPECT_NE(message(flops).find("--samples"), std::string::npos);
  EXPECT_FALSE(has_model_size(SizeArguments{}));
  EXPECT_NE(message(SizeArguments{}).find("nothing to plan"), std::string::npos);
}

TEST(PlanMemory, BytesPerParameterInEveryShardMode) {
  // float32 weights and gradients with Adam on a shard group of S ranks: none 4 + 4 + 8,
  // optimizer 4 + 4 + 8/S, gradients 4 + 4/S + 8/S, full (4 + 4 + 8)/S.
  for (int s : {1, 2, 4, 8, 64}) {
    const double d = s;
    auto f32 = [&](ShardMode mode) {
      return parameter_bytes(WeightLayout::kFloat32, "adamw", s, mode);
    };
    const ParameterBytes none = f32(ShardMode::kNone);
    EXPECT_DOUBLE_EQ(none.weights, 4);
    EXPECT_DOUBLE_EQ(none.gradients, 4);
    EXPECT_DOUBLE_EQ(none.sharded, 8);
    const ParameterBytes optimizer = f32(ShardMode::kOptimizer);
    EXPECT_DOUBLE_EQ(optimizer.weights, 4);
    EXPECT_DOUBLE_EQ(optimizer.gradients, 4);
    EXPECT_DOUBLE_EQ(optimizer.sharded, 8 / d);
    const ParameterBytes gradients = f32(ShardMode::kGradients);
    EXPECT_DOUBLE_EQ(gradients.weights, 4);
    EXPECT_DOUBLE_EQ(gradients.gradients, 4 / d);
    EXPECT_DOUBLE_EQ(gradients.sharded, 8 / d);
    const ParameterBytes full = f32(ShardMode::kFull);
    EXPECT_DOUBLE_EQ(full.weights, 4 / d);
    EXPECT_DOUBLE_EQ(full.gradients, 4 / d);
    EXPECT_DOUBLE_EQ(full.sharded, 8 / d);
    EXPECT_DOUBLE_EQ(full.total(), 16 / d);
    // The old switch is the optimizer mode, bit for bit.
    const ParameterBytes old = parameter_bytes(WeightLayout::kFloat32, "adamw", s, true);
    EXPECT_EQ(old.total(), optimizer.total());
    EXPECT_EQ(parameter_bytes(WeightLayout::kFloat32, "adamw", s, false).total(), none.total());
    // bf16 weights, float32 gradients, float32 master weights with the optimizer state.
    auto bf16 = [&](ShardMode mode) {
      return parameter_bytes(WeightLayout::kBf16WithFloat32Master, "adam", s, mode).total();
    };
    EXPECT_DOUBLE_EQ(bf16(ShardMode::kNone), 18);
    EXPECT_DOUBLE_EQ(bf16(ShardMode::kOptimizer), 6 + 12 / d);
    EXPECT_DOUBLE_EQ(bf16(ShardMode::kGradients), 2 + 16 / d);
    EXPECT_DOUBLE_EQ(bf16(ShardMode::kFull), 18 / d);
    // SGD with momentum keeps 4 bytes of state: full divides 12.
    EXPECT_DOUBLE_EQ(
        parameter_bytes(WeightLayout::kFloat32, "sgd-momentum", s, ShardMode::kFull).total(),
        12 / d);
  }
  EXPECT_THROW(parameter_bytes(WeightLayout::kFloat32, "adam", 0, ShardMode::kFull), ConfigError);
  EXPECT_EQ(parse_shard_mode("gradients", "--shard"), ShardMode::kGradients);
  EXPECT_NE(config_error_of([] { parse_shard_mode("zero3", "--shard"); }).find("--shard"),
            std::string::npos);
}

// configs/gpt-medium.yaml: 8 blocks of width 512, 8 heads, 256 tokens, a byte vocabulary, tied.
MemoryInputs gpt_medium_inputs(int dp, int tp) {
  MemoryInputs m;
  m.dp = dp;
  m.tp = tp;
  m.decoder = true;
  m.shape = TransformerShape{8, 512, 256, 256, 4.0, true};
  m.heads = 8;
  m.micro_batch = 8;
  m.parameters_per_device =
      (transformer_non_embedding_parameters(m.shape) + transformer_embedding_parameters(m.shape)) /
      tp;
  return m;
}

TEST(PlanMemory, PeakAddsWhatEachShardModeHoldsBesideItsState) {
  MemoryInputs m = gpt_medium_inputs(8, 1);
  const double n = m.parameters_per_device;
  // The gather units by hand: a block 4 D^2 + 2 F D + 9 D + F, the root V D + T D + 2 D; the
  // blocks and the root are the whole model.
  const double block = 4.0 * 512 * 512 + 2.0 * 2048 * 512 + 9 * 512 + 2048;
  const double root = 256.0 * 512 + 256.0 * 512 + 2 * 512;
  const GatherUnits u = gpt_gather_units(m.shape, 1);
  EXPECT_DOUBLE_EQ(u.block, block);
  EXPECT_DOUBLE_EQ(u.root, root);
  EXPECT_DOUBLE_EQ(8 * block + root, n);
  EXPECT_DOUBLE_EQ(gpt_gather_units(m.shape, 2).block, block / 2);

  const double activations =
      gpt_activation_bytes(m.shape, 8, 8, 1, 4, false, RecomputeMode::kNone).total();
  // none and optimizer: state and activations only (the buckets are views of the gradients).
  for (auto mode : {ShardMode::kNone, ShardMode::kOptimizer}) {
    m.shard_mode = mode;
    const MemoryPlan p = make_memory_plan(m, "adamw", 0, 0);
    EXPECT_DOUBLE_EQ(p.total_bytes, n * p.run.total() + activations);
    EXPECT_DOUBLE_EQ(p.gathered_bytes + p.gathered_gradient_bytes + p.bucket_in_flight_bytes, 0);
  }
  // gradients: one bucket filling and two in flight, at most every gradient.
  m.shard_mode = ShardMode::kGradients;
  MemoryPlan p = make_memory_plan(m, "adamw", 0, 0);
  EXPECT_DOUBLE_EQ(p.bucket_in_flight_bytes, 3 * 25.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(p.total_bytes, n * (4 + 12.0 / 8) + activations + 75.0 * (1 << 20));
  m.bucket_bytes = 100e6;
  EXPECT_DOUBLE_EQ(make_memory_plan(m, "adamw", 0, 0).bucket_in_flight_bytes, 4 * n);
  // full: two blocks and the root gathered; the gradients of three blocks (one accumulating, two
  // reducing) and the root, at param_dtype.
  m.shard_mode = ShardMode::kFull;
  p = make_memory_plan(m, "adamw", 0, 0);
  EXPECT_DOUBLE_EQ(p.state_bytes, n * 16 / 8);
  EXPECT_DOUBLE_EQ(p.gathered_bytes, (2 * block + root) * 4);
  EXPECT_DOUBLE_EQ(p.gathered_gradient_bytes, (3 * block + root) * 4);
  EXPECT_DOUBLE_EQ(p.total_bytes, n * 2 + activations + (5 * block + 2 * root) * 4);
  m.param_dtype_bytes = 2;
  EXPECT_DOUBLE_EQ(make_memory_plan(m, "adamw", 0, 0).gathered_bytes, (2 * block + root) * 2);
  // A hybrid group of 2: each rank holds half the state.
  m.param_dtype_bytes = 4;
  m.shard_ranks = 2;
  EXPECT_DOUBLE_EQ(make_memory_plan(m, "adamw", 0, 0).state_bytes, n * 16 / 2);
  m.shard_ranks = 3;  // does not divide dp = 8
  EXPECT_NE(config_error_of([&] { make_memory_plan(m, "adamw", 0, 0); }).find("shard_group"),
            std::string::npos);
}

TEST(PlanMemory, StepCommunicationPerShardMode) {
  MemoryInputs m = gpt_medium_inputs(8, 1);
  const double n = m.parameters_per_device;
  const double root = gpt_gather_units(m.shape, 1).root;
  // none: a ring all-reduce of the float32 gradients, 2 x 4 N x 7/8.
  StepCommunication c = step_communication(m);
  EXPECT_DOUBLE_EQ(c.total(), 2 * 4 * n * 7 / 8);
  EXPECT_DOUBLE_EQ(c.reduce, c.total());
  // optimizer and gradients: reduce-scatter + all-gather, the same bytes; so with a hybrid group
  // of 2 (reduce-scatter over 2, the half all-reduced over the 4 groups, all-gather over 2).
  for (auto mode : {ShardMode::kOptimizer, ShardMode::kGradients}) {
    m.shard_mode = mode;
    m.shard_ranks = 0;
    c = step_communication(m);
    EXPECT_DOUBLE_EQ(c.reduce, 4 * n * 7 / 8);
    EXPECT_DOUBLE_EQ(c.gather, 4 * n * 7 / 8);
    EXPECT_DOUBLE_EQ(c.replicas, 0);
    m.shard_ranks = 2;
    c = step_communication(m);
    EXPECT_DOUBLE_EQ(c.reduce, 4 * n / 2);
    EXPECT_DOUBLE_EQ(c.replicas, 2 * (4 * n / 2) * 3 / 4);
    EXPECT_NEAR(c.total(), 2 * 4 * n * 7 / 8, 1e-6 * n);
  }
  // full: forward all-gather, the backward one (the root stays gathered), reduce-scatter: about
  // 3 x; 2 x without resharding after forward; a hybrid group of 2 sends less.
  m.shard_mode = ShardMode::kFull;
  m.shard_ranks = 0;
  c = step_communication(m);
  EXPECT_DOUBLE_EQ(c.gather, (4 * n + 4 * (n - root)) * 7 / 8);
  EXPECT_DOUBLE_EQ(c.reduce, 4 * n * 7 / 8);
  EXPECT_DOUBLE_EQ(c.replicas, 0);
  const double full_dp = c.total();
  m.reshard_after_forward = false;
  EXPECT_DOUBLE_EQ(step_communication(m).gather, 4 * n * 7 / 8);
  m.reshard_after_forward = true;
  m.shard_ranks = 2;
  c = step_communication(m);
  EXPECT_DOUBLE_EQ(c.total(), (8 * n - 4 * root) / 2 + 4 * n / 2 + 2 * (4 * n / 2) * 3 / 4);
  EXPECT_LT(c.total(), full_dp);
  // Two micro-batches gather and reduce-scatter twice; the cross-group all-reduce stays once.
  m.micro_batches = 2;
  const StepCommunication twice = step_communication(m);
  EXPECT_DOUBLE_EQ(twice.gather, 2 * c.gather);
  EXPECT_DOUBLE_EQ(twice.reduce, 2 * c.reduce);
  EXPECT_DOUBLE_EQ(twice.replicas, c.replicas);
  // tp = 2: the activation all-reduces, B T D x 4 bytes each, 2 + 4 per block (6 recomputed).
  MemoryInputs t = gpt_medium_inputs(4, 2);
  const double x = 8.0 * 256 * 512 * 4;
  EXPECT_DOUBLE_EQ(step_communication(t).tensor_parallel, (2 + 4 * 8) * 2 * x / 2);
  t.recompute = RecomputeMode::kBlock;
  EXPECT_DOUBLE_EQ(step_communication(t).tensor_parallel, (2 + 6 * 8) * 2 * x / 2);
  EXPECT_DOUBLE_EQ(step_communication(t).reduce, 2 * 4 * t.parameters_per_device * 3 / 4);
}

// The search of gpt-medium on 64 devices, 8 per node, with `memory` bytes each.
LayoutSearchInputs gpt_medium_search(double memory) {
  LayoutSearchInputs s;
  s.run = gpt_medium_inputs(64, 1);
  s.optimizer = "adamw";
  s.parameters = s.run.parameters_per_device;
  s.devices = 64;
  s.devices_per_node = 8;
  s.device_memory = memory;
  return s;
}

const LayoutCandidate& chosen(const LayoutSearch& s) {
  return s.candidates.at(static_cast<std::size_t>(s.chosen));
}

TEST(PlanLayout, SearchPicksTheLeastCommunicatingLayoutThatFits) {
  // Everything fits: nothing sharded, no tp, no recomputation (the all-reduce is the fewest
  // bytes, and the optimizer mode's equal bytes lose the tie).
  LayoutSearch all = search_layouts(gpt_medium_search(80.0 * (1ull << 30)));
  // tp 1, 2, 4, 8 x (none + 3 modes x groups) x 2 recompute modes.
  EXPECT_GT(all.candidates.size(), 100u);
  ASSERT_GE(all.chosen, 0);
  EXPECT_EQ(layout_settings(chosen(all).plan.in),
            "parallel.shard=none parallel.tp=1 model.recompute=none");
  for (const auto& c : all.candidates) EXPECT_TRUE(c.plan.fits());
  const double none_bytes = chosen(all).plan.comm.total();
  for (const auto& c : all.candidates) EXPECT_GE(c.plan.comm.total(), none_bytes * (1 - 1e-12));

  // The smallest peak of the non-full layouts and of the full ones: between them only full fits.
  double non_full = 1e300;
  double full = 1e300;
  for (const auto& c : all.candidates) {
    double& least = c.plan.in.mode() == ShardMode::kFull ? full : non_full;
    least = std::min(least, c.plan.total_bytes);
  }
  ASSERT_LT(full, non_full);
  const LayoutSearch only_full = search_layouts(gpt_medium_search((full + non_full) / 2));
  ASSERT_GE(only_full.chosen, 0);
  EXPECT_EQ(chosen(only_full).plan.in.mode(), ShardMode::kFull);
  EXPECT_LE(chosen(only_full).plan.total_bytes, (full + non_full) / 2);
  for (const auto& c : only_full.candidates) {
    if (c.plan.fits()) {
      EXPECT_EQ(c.plan.in.mode(), ShardMode::kFull);
      EXPECT_GE(c.plan.comm.total(), chosen(only_full).plan.comm.total() * (1 - 1e-12));
    }
  }
  EXPECT_FALSE(only_full
                   .candidates[static_cast<std::size_t>(
                       only_full.best_of_mode[static_cast<int>(ShardMode::kGradients)])]
                   .plan.fits());

  // Nothing fits in 1 MiB.
  EXPECT_EQ(search_layouts(gpt_medium_search(1 << 20)).chosen, -1);
}

TEST(PlanLayout, HybridShardGroupWinsWhenItFits) {
  // Under full a smaller shard group sends fewer bytes (3 (S-1)/S of the parameters within the
  // group, the chunk all-reduced across groups) and holds more: with memory for the group of 8
  // ranks (one node at tp 1) and not for tp > 1 or another mode, the choice is that hybrid.
  LayoutSearchInputs s = gpt_medium_search(0);
  MemoryInputs node = s.run;
  node.shard_mode = ShardMode::kFull;
  node.shard_ranks = 8;
  node.recompute = RecomputeMode::kBlock;
  const MemoryPlan hybrid = make_memory_plan(node, "adamw", 0, 0);
  node.shard_ranks = 64;
  const MemoryPlan whole = make_memory_plan(node, "adamw", 0, 0);
  EXPECT_LT(hybrid.comm.total(), whole.comm.total());
  EXPECT_GT(hybrid.total_bytes, whole.total_bytes);
  s.device_memory = hybrid.total_bytes * 1.0001;
  s.vary_tp = false;
  const LayoutSearch found = search_layouts(s);
  ASSERT_GE(found.chosen, 0);
  const MemoryInputs& c = chosen(found).plan.in;
  EXPECT_EQ(c.mode(), ShardMode::kFull);
  EXPECT_LT(c.group(), 64);
  EXPECT_LE(chosen(found).plan.comm.total(), hybrid.comm.total());
  EXPECT_EQ(layout_settings(hybrid.in),
            "parallel.shard=full parallel.shard_group=8 parallel.tp=1 model.recompute=block");
  EXPECT_TRUE(found.candidates[static_cast<std::size_t>(found.chosen)].node_group ||
              c.group() != 8);
  // JSON: the choice and the best of each mode.
  const auto j = layout_search_to_json(found, s);
  EXPECT_EQ(j["chosen"]["shard"], "full");
  EXPECT_EQ(j["chosen"]["settings"], layout_settings(c));
  EXPECT_TRUE(j["best_of_each_shard"].contains("none"));
  EXPECT_FALSE(j["best_of_each_shard"]["none"]["fits"].get<bool>());
}

TEST(PlanCalibration, Int8EvaluationDividesTheFloat32EvaluationBySpeed) {
  PlanInputs in = transformer_inputs(1e6, 1e9);
  in.eval_samples_per_pass = 1e6;
  in.eval_passes = 4;
  in.peak_flops_per_device = 1e12;
  const ComputePlan plan = make_plan(in);
  const Int8Evaluation e = int8_evaluation(plan, 2.0);
  EXPECT_DOUBLE_EQ(e.eval_wall_per_pass_s, plan.eval_wall_per_pass_s / 2);
  EXPECT_DOUBLE_EQ(e.eval_wall_s, plan.eval_wall_s / 2);
  EXPECT_DOUBLE_EQ(e.eval_device_hours, plan.eval_device_hours / 2);
  EXPECT_THROW(int8_evaluation(plan, 0), ConfigError);
  in.peak_flops_per_device = 0;  // not timed: nothing to scale
  EXPECT_THROW(int8_evaluation(make_plan(in), 2.0), ConfigError);

  const LedgerCalibration c = read_ledger_calibration(ledger_json(), "run/ledger.json");
  auto j = calibration_to_json(c, 1e10);
  EXPECT_EQ(j["world_size"], 2);
  EXPECT_DOUBLE_EQ(j["utilization"].get<double>(), c.train_flops_per_s_per_device / 1e10);
  EXPECT_TRUE(calibration_to_json(c, 0)["utilization"].is_null());
}

}  // namespace
}  // namespace hpctrain::plan
