#include "hpctrain/plan/size_arguments.hpp"

#include "hpctrain/runtime/error.hpp"

namespace hpctrain::plan {

bool has_model_size(const SizeArguments& a) {
  return a.params > 0 || a.layers > 0 || a.width > 0 || a.forward_flops > 0;
}

PlanInputs inputs_from_sizes(const SizeArguments& a, int devices, MemoryInputs& memory) {
  PlanInputs in;
  in.source = "size arguments";
  in.devices = devices;
  in.epochs = a.epochs > 0 ? a.epochs : 1;
  in.optimizer = a.optimizer.empty() ? "adam" : a.optimizer;
  const bool transformer = a.params > 0 || (a.layers > 0 && a.width > 0);
  if (transformer) {
    if ((a.layers > 0) != (a.width > 0) && a.params <= 0) {
      throw ConfigError("give both --layers and --width (or --params) to size a transformer");
    }
    in.model_name = "transformer";
    in.task = Task::kLanguageModel;
    const TransformerShape shape{a.layers, a.width, a.seq_len, a.vocab, a.mlp_ratio, true};
    const bool shaped = a.layers > 0 && a.width > 0;
    const double n = a.params > 0 ? a.params : transformer_non_embedding_parameters(shape);
    in.non_embedding_parameters = n;
    in.parameters = n;
    if (a.params <= 0 && a.vocab > 0) in.parameters += transformer_embedding_parameters(shape);
    const bool attention = shaped && a.seq_len > 0;
    const bool head = shaped && a.vocab > 0;
    const double per_token =
        (attention ? transformer_forward_flops_per_token(n, a.layers, a.seq_len, a.width)
                   : 2.0 * n) +
        (head ? transformer_head_flops_per_token(a.width, a.vocab) : 0.0);
    in.flops_formula = attention ? "6 N D + 6 layers T width D (training), 2 N D + 2 layers T "
                                   "width D (evaluation)"
                                 : "6 N D (training), 2 N D (evaluation)";
    if (head) in.flops_formula += ", plus 6 width V D / 2 width V D for the output head";
    // A sample is a sequence when the sequence length is known, else a token.
    in.tokens_per_sample = a.seq_len > 0 ? static_cast<double>(a.seq_len) : 1.0;
    in.forward_flops_per_sample = per_token * in.tokens_per_sample;
    if (a.tokens > 0) {
      in.samples_per_epoch = a.tokens / in.tokens_per_sample;
    } else if (a.samples > 0) {
      in.samples_per_epoch = a.samples;
    } else {
      throw ConfigError("give the training tokens D with --tokens (e.g. --tokens 300e9)");
    }
    if (a.eval_tokens > 0) {
      in.eval_samples_per_pass = a.eval_tokens / in.tokens_per_sample;
    } else if (a.eval_samples > 0) {
      in.eval_samples_per_pass = a.eval_samples;
    }
  } else if (a.forward_flops > 0) {
    in.model_name = "model";
    in.task = Task::kClassification;
    in.parameters = a.params;
    in.forward_flops_per_sample = a.forward_flops;
    in.flops_formula = "--forward-flops per sample, training 3x forward";
    if (a.samples <= 0) throw ConfigError("give the samples of an epoch with --samples N");
    in.samples_per_epoch = a.samples;
    in.eval_samples_per_pass = a.eval_samples;
  } else {
    throw ConfigError(
        "nothing to plan: give --config FILE, or a transformer's size (--params N, or --layers "
        "and --width) with --tokens D, or --forward-flops F with --samples S; see hpctrain plan "
        "--help and docs/PLAN.md");
  }
  in.train_samples = in.samples_per_epoch * in.epochs;
  in.eval_passes = a.evals >= 0 ? a.evals : (in.eval_samples_per_pass > 0 ? 1 : 0);
  memory.dp = devices;
  memory.shard = a.shard_optimizer;
  memory.parameters_per_device = in.parameters;
  if (transformer && a.layers > 0 && a.width > 0 && a.seq_len > 0 && a.vocab > 0 && a.heads > 0 &&
      a.micro_batch > 0) {
    memory.decoder = true;
    memory.shape = TransformerShape{a.layers, a.width, a.seq_len, a.vocab, a.mlp_ratio, true};
    memory.heads = a.heads;
    memory.micro_batch = a.micro_batch;
  }
  return in;
}

}  // namespace hpctrain::plan
