#pragma once
// A plan from sizes alone (`hpctrain plan --params/--layers/--width/--forward-flops ...`, no
// config): the model, its work and its memory inputs. Pure arithmetic, no LibTorch, MPI or HDF5.
// Local.

#include <cstdint>
#include <string>

#include "hpctrain/plan/compute_plan.hpp"
#include "hpctrain/plan/memory_plan.hpp"

namespace hpctrain::plan {

/// The model and work of a run given as numbers (docs/PLAN.md, "Size arguments"); 0 = not given.
struct SizeArguments {
  double params = 0;  ///< transformer N (training 6 N D), or any model's parameters
  std::int64_t layers = 0;
  std::int64_t width = 0;
  std::int64_t seq_len = 0;  ///< adds the attention FLOPs; a sample is then a sequence
  std::int64_t vocab = 0;    ///< adds the embedding parameters
  double mlp_ratio = 4.0;
  double forward_flops = 0;  ///< per sample, of a model that is not a transformer
  double tokens = 0;         ///< training tokens per epoch
  double samples = 0;        ///< training samples per epoch
  double epochs = 0;         ///< 0: 1
  double eval_tokens = 0;
  double eval_samples = 0;
  double evals = -1;      ///< evaluation passes; < 0: one when an evaluation size is given
  std::string optimizer;  ///< empty: adam
  bool shard_optimizer = false;
  std::int64_t heads = 0;        ///< with layers, width, seq_len, vocab and micro_batch: the
  std::int64_t micro_batch = 0;  ///< activation estimate
};

/// Whether any model size is given (as opposed to a config). Local.
bool has_model_size(const SizeArguments& a);

/// The plan inputs of `a` on `devices` data-parallel devices, and the memory inputs into
/// `memory`. Throws ConfigError naming the missing argument (no model size, a transformer without
/// its tokens, --forward-flops without --samples). Local.
PlanInputs inputs_from_sizes(const SizeArguments& a, int devices, MemoryInputs& memory);

}  // namespace hpctrain::plan
