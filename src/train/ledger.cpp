#include "hpctrain/train/ledger.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "hpctrain/comm/control_plane.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

nlohmann::ordered_json build_ledger(const PhaseSeconds& mine, const LedgerFacts& f,
                                    comm::ControlPlane& world) {
  std::vector<double> p{mine.forward,    mine.backward,   mine.optimizer,
                        mine.comm_wait,  mine.data_wait,  mine.eval,
                        mine.checkpoint, mine.train_wall, mine.total_wall};
  // Each rank's own phases, for the report page's per-rank breakdown (stragglers show there).
  nlohmann::ordered_json per_rank = nlohmann::ordered_json::object();
  const char* phase_names[] = {"forward", "backward",   "optimizer",  "comm_wait", "data_wait",
                               "eval",    "checkpoint", "train_loop", "total"};
  for (std::size_t i = 0; i < p.size(); ++i) per_rank[phase_names[i]] = world.all_gather(p[i]);
  world.reduce(p, comm::ReduceOp::kSum);
  const std::vector<std::int64_t> peaks = world.all_gather(peak_rss_bytes());
  const std::vector<std::int64_t> device_peaks = world.all_gather(f.peak_device_memory_bytes);
  const std::vector<std::int64_t> tensor_peaks = world.all_gather(f.peak_tensor_bytes);

  const double train_flops_per_sample = 3.0 * f.forward_flops_per_sample;  // forward + 2x backward
  const double train_flops = train_flops_per_sample * static_cast<double>(f.samples_trained);
  const double eval_flops = f.forward_flops_per_sample * static_cast<double>(f.samples_evaluated);
  // Wall time of the loop = rank-seconds / ranks (ranks run in lock step).
  const double train_wall = p[7] / f.world_size;
  const double train_sps = train_wall > 0 ? f.samples_trained / train_wall : 0;
  const double eval_sps = f.eval_seconds_total > 0 ? f.samples_evaluated / f.eval_seconds_total : 0;

  nlohmann::ordered_json j;
  j["model"] = {{"name", f.model_name},
                {"task", task_name(f.task)},
                {"parameters", f.parameters},
                {"tokens_per_sample", f.tokens_per_sample}};
  j["grid"] = {{"world_size", f.world_size},
               {"dp", f.dp},
               {"pp", f.pp},
               {"tp", f.tp},
               {"threads_per_rank", f.threads_per_rank},
               {"device", f.device}};
  j["steps"] = f.steps;
  j["precision"] = precision_name(f.precision);
  j["tf32"] = {{"matmul", f.tf32_matmul}, {"cudnn", f.tf32_cudnn}, {"source", f.tf32_source}};
  j["kernels"] = {{"optimizer", f.optimizer_kernel}, {"cross_entropy", f.cross_entropy_kernel}};
  j["skipped_steps"] = f.skipped_steps;
  if (f.loss_scale > 0) j["loss_scale"] = f.loss_scale;
  j["samples_trained"] = f.samples_trained;
  j["samples_evaluated"] = f.samples_evaluated;
  j["rank_seconds"] = {{"forward", p[0]},    {"backward", p[1]},   {"optimizer", p[2]},
                       {"comm_wait", p[3]},  {"data_wait", p[4]},  {"eval", p[5]},
                       {"checkpoint", p[6]}, {"train_loop", p[7]}, {"total", p[8]}};
  j["wall_seconds"] = {
      {"train_loop", train_wall}, {"eval", f.eval_seconds_total}, {"total", p[8] / f.world_size}};
  j["flops"] = {{"forward_per_sample", f.forward_flops_per_sample},
                {"train_per_sample", train_flops_per_sample},
                {"eval_per_sample", f.forward_flops_per_sample},
                {"train_total", train_flops},
                {"eval_total", eval_flops},
                {"source", f.flops_source}};
  j["throughput"] = {
      {"train_samples_per_s", train_sps},
      {"eval_samples_per_s", eval_sps},
      {"train_flops_per_s", train_wall > 0 ? train_flops / train_wall : 0},
      {"train_flops_per_s_per_rank", train_wall > 0 ? train_flops / train_wall / f.world_size : 0},
      {"eval_flops_per_s", f.eval_seconds_total > 0 ? eval_flops / f.eval_seconds_total : 0}};
  if (f.tokens_per_sample > 1) {
    j["throughput"]["train_tokens_per_s"] = train_sps * static_cast<double>(f.tokens_per_sample);
    j["throughput"]["eval_tokens_per_s"] = eval_sps * static_cast<double>(f.tokens_per_sample);
  }
  // Measured: seconds per trained sample over seconds per evaluated sample (FLOPs predict 3).
  j["cost_ratio_train_to_eval"] = {
      {"flops", 3.0}, {"measured", (train_sps > 0 && eval_sps > 0) ? eval_sps / train_sps : 0}};
  j["rank_seconds_per_rank"] = per_rank;
  // The per-rank spread the straggler detector saw each logging interval, and whom it named.
  if (!f.stragglers.is_null()) j["stragglers"] = f.stragglers;
  if (f.pp > 1) {
    // The bubble measured: each rank's waits for its neighbours over the wall time of the
    // schedules (forwards, backwards, messages); against the formula for the schedule.
    const std::vector<double> waits = world.all_gather(mine.pipeline_wait);
    const std::vector<double> walls = world.all_gather(mine.pipeline_wall);
    std::vector<double> fractions;
    double wait_sum = 0, wall_sum = 0;
    for (std::size_t r = 0; r < waits.size(); ++r) {
      fractions.push_back(walls[r] > 0 ? waits[r] / walls[r] : 0);
      wait_sum += waits[r];
      wall_sum += walls[r];
    }
    j["pipeline"] = {{"pp", f.pp},
                     {"schedule", f.pp_schedule},
                     {"virtual_stages", f.pp_virtual},
                     {"micro_batches", f.micro_batches},
                     {"bubble_seconds_per_rank", waits},
                     {"schedule_seconds_per_rank", walls},
                     {"bubble_fraction_per_rank", fractions},
                     {"bubble_fraction", wall_sum > 0 ? wait_sum / wall_sum : 0},
                     {"predicted_bubble_fraction", f.predicted_bubble_fraction}};
  }
  j["peak_rss_bytes_per_rank"] = peaks;
  // Host tensors alive at once: the part of peak RSS that the plan's memory estimate models.
  if (*std::min_element(tensor_peaks.begin(), tensor_peaks.end()) >= 0) {
    j["peak_tensor_bytes_per_rank"] = tensor_peaks;
  }
  if (*std::min_element(device_peaks.begin(), device_peaks.end()) >= 0) {
    j["peak_device_memory_bytes_per_rank"] = device_peaks;
  }
  // Every rank of a dp group holds the same amounts; rank 0's stand for its group.
  j["memory_per_rank"] = {{"parameter_bytes", f.parameter_bytes},
                          {"gradient_bytes", f.gradient_bytes},
                          {"optimizer_state_bytes", f.optimizer_state_bytes},
                          {"activation_bytes_estimate", f.activation_bytes_estimate},
                          {"shard_optimizer", f.shard_optimizer},
                          {"shard", f.shard},
                          {"recompute", f.recompute}};
  j["dp_communication_bytes_per_step"] = {{"all_reduce", f.dp_all_reduce_bytes},
                                          {"reduce_scatter", f.dp_reduce_scatter_bytes},
                                          {"all_gather", f.dp_all_gather_bytes}};
  return j;
}

std::string ledger_summary(const nlohmann::ordered_json& j) {
  const auto& rs = j["rank_seconds"];
  const double total = rs["total"].get<double>();
  auto pct = [&](const char* key) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f%%",
                  total > 0 ? 100.0 * rs[key].get<double>() / total : 0.0);
    return std::string(buf);
  };
  char line[512];
  std::string out = "compute ledger (ledger.json):\n";
  std::snprintf(line, sizeof line,
                "  rank-seconds %.1f: forward %s, backward %s, optimizer %s, comm wait %s, data "
                "wait %s, eval %s, checkpoint %s\n",
                total, pct("forward").c_str(), pct("backward").c_str(), pct("optimizer").c_str(),
                pct("comm_wait").c_str(), pct("data_wait").c_str(), pct("eval").c_str(),
                pct("checkpoint").c_str());
  out += line;
  const auto& t = j["throughput"];
  const double eval_rate = t["eval_samples_per_s"].get<double>();
  std::snprintf(line, sizeof line, "  train %.0f samples/s (%.2f GFLOP/s), ",
                t["train_samples_per_s"].get<double>(), t["train_flops_per_s"].get<double>() / 1e9);
  out += line;
  if (eval_rate > 0) {
    std::snprintf(line, sizeof line,
                  "eval %.0f samples/s; FLOPs/sample train %.3g, eval %.3g; measured train:eval "
                  "cost per sample %.2f (FLOPs say 3)\n",
                  eval_rate, j["flops"]["train_per_sample"].get<double>(),
                  j["flops"]["eval_per_sample"].get<double>(),
                  j["cost_ratio_train_to_eval"]["measured"].get<double>());
  } else {
    std::snprintf(line, sizeof line,
                  "no evaluation ran; FLOPs/sample train %.3g, eval %.3g (train:eval 3 by "
                  "FLOPs)\n",
                  j["flops"]["train_per_sample"].get<double>(),
                  j["flops"]["eval_per_sample"].get<double>());
  }
  out += line;
  std::int64_t peak = 0;
  for (const auto& v : j["peak_rss_bytes_per_rank"]) peak = std::max(peak, v.get<std::int64_t>());
  out += str("  peak resident memory per rank: up to ", format_bytes(static_cast<double>(peak)));
  if (j.contains("pipeline")) {
    const auto& pl = j["pipeline"];
    std::snprintf(line, sizeof line,
                  "\n  pipeline bubble (pp=%d %s, %d micro-batches): measured %.1f%% of the "
                  "schedule, predicted %.1f%%",
                  pl["pp"].get<int>(), pl["schedule"].get<std::string>().c_str(),
                  pl["micro_batches"].get<int>(), 100 * pl["bubble_fraction"].get<double>(),
                  100 * pl["predicted_bubble_fraction"].get<double>());
    out += line;
  }
  return out;
}

}  // namespace hpctrain::train
