#pragma once
// Text generation from a language model (docs/GENERATE.md): prompts in, continuations out, in
// batches; greedy or sampled (temperature, top-k, top-p) from a seeded generator; stop tokens and
// a limit of new tokens. With a model that decodes incrementally (Model::make_kv_cache) a batch
// is prefilled once (its prompts left-padded to the longest) and then decoded one token per step
// from the KV cache; without one (or with use_cache false) every step runs forward() over each
// prompt and what it generated so far. Both compute the same function: greedy decoding gives the
// same tokens either way.
//
// Tensor parallelism: every rank of a tp group calls generate() with the same prompts and
// options; the logits are gathered over the group (Model::full_logits), so every rank samples
// the same tokens from its own generator seeded alike.

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::model {
class Model;
}

namespace hpctrain::eval {

/// How to continue the prompts.
struct GenerateOptions {
  std::int64_t max_new_tokens = 64;  ///< per prompt; fewer when the model's context ends first
  double temperature = 0;            ///< 0: greedy (argmax, lowest id on ties); else sample
  std::int64_t top_k = 0;            ///< sample from the k most likely tokens (0: all)
  double top_p = 1.0;                ///< sample from the smallest set reaching this mass (1: all)
  std::uint64_t seed = 0;            ///< the sampling generator's seed
  std::vector<std::int64_t> stop_tokens;  ///< a row ends at any of these (not included)
  std::int64_t batch_size = 8;            ///< prompts decoded together
  bool use_cache = true;                  ///< KV cache when the model has one
};

/// One prompt's continuation.
struct Continuation {
  std::vector<std::int64_t> tokens;  ///< the new tokens (without a stop token)
  /// "stop" (a stop token), "length" (max_new_tokens) or "context" (the model's context ended).
  std::string finish_reason;
};

/// What a call generated and how fast.
struct Generation {
  std::vector<Continuation> continuations;  ///< one per prompt, in prompt order
  std::int64_t new_tokens = 0;              ///< all continuations' tokens together
  double seconds = 0;                       ///< the whole call
  double first_token_seconds = 0;  ///< time to first token: the first batch's prefill and sample
  double tokens_per_second = 0;    ///< new_tokens / seconds
  bool cached = false;             ///< decoded from a KV cache
};

/// Continues every prompt (token ids; at least one token each, fewer than the model's context).
/// Throws ConfigError for options out of range and DataError for a prompt that does not fit.
/// Collective over the model's tp group (every rank passes the same prompts and options).
Generation generate(model::Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
                    const GenerateOptions& options);

/// Checks the options (temperature >= 0, top_k >= 0, 0 < top_p <= 1, batch_size >= 1,
/// max_new_tokens >= 0) and throws ConfigError naming `prefix` + the field. Local.
void check_generate_options(const GenerateOptions& options, const std::string& prefix);

}  // namespace hpctrain::eval
