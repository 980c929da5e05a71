#include "memory_facts.hpp"

#include "hpctrain/model/gpt.hpp"
#include "hpctrain/model/llama.hpp"
#include "hpctrain/parallel/data_parallel_strategy.hpp"
#include "hpctrain/parallel/vocab_parallel_cross_entropy.hpp"
#include "hpctrain/plan/memory_plan.hpp"
#include "hpctrain/train/optimizer.hpp"

namespace hpctrain::train {

void add_memory_facts(LedgerFacts& facts, model::Model& model, parallel::DataParallelStrategy& dp,
                      Optimizer& optimizer, const TrainConfig& cfg) {
  facts.parameter_bytes = dp.parameter_bytes();
  facts.gradient_bytes = dp.gradient_bytes();
  facts.optimizer_state_bytes = 0;
  for (const auto& item : optimizer.state()) {
    facts.optimizer_state_bytes +=
        item.second.numel() * static_cast<std::int64_t>(item.second.element_size());
  }
  facts.shard_optimizer = optimizer.sharded();
  facts.optimizer_kernel = optimizer.kernel();
  facts.shard = parallel::shard_mode_name(dp.mode());
  const parallel::StrategyTraffic traffic = dp.traffic_per_step(cfg.optim.grad_accumulation);
  facts.dp_all_reduce_bytes = traffic.all_reduce_bytes;
  facts.dp_reduce_scatter_bytes = traffic.reduce_scatter_bytes;
  facts.dp_all_gather_bytes = traffic.all_gather_bytes;
  plan::TransformerShape shape;
  std::int64_t heads = 0;
  bool dropout = false;
  model::Recompute recompute = model::Recompute::kNone;
  if (const auto* gpt = dynamic_cast<const model::Gpt*>(&model)) {
    const model::GptOptions& g = gpt->options();
    shape = model::gpt_shape(g);
    heads = g.heads;
    dropout = g.dropout > 0;
    recompute = g.recompute;
  } else if (const auto* llama = dynamic_cast<const model::Llama*>(&model)) {
    shape = model::llama_shape(llama->options());
    heads = llama->options().heads;
    recompute = llama->options().recompute;
  } else {
    return;
  }
  plan::RecomputeMode mode = plan::RecomputeMode::kNone;
  if (recompute == model::Recompute::kBlock) mode = plan::RecomputeMode::kBlock;
  if (recompute == model::Recompute::kAttention) mode = plan::RecomputeMode::kAttention;
  facts.recompute = plan::recompute_name(mode);
  const bool on_cpu = facts.device.rfind("cpu", 0) == 0;
  facts.cross_entropy_kernel =
      parallel::choose_cross_entropy(facts.tp,
                                     on_cpu ? c10::DeviceType::CPU : c10::DeviceType::CUDA) ==
              parallel::CrossEntropyKernel::kLibTorch
          ? "libtorch"
          : "vocab parallel";
  facts.activation_bytes_estimate =
      plan::gpt_activation_bytes(shape, heads, cfg.data.batch_size, facts.tp,
                                 activation_element_bytes(cfg.run.precision), dropout, mode,
                                 on_cpu ? plan::kCpuDropoutMask : 1)
          .total();
}

}  // namespace hpctrain::train
