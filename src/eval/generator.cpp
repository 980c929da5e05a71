#include "hpctrain/eval/generator.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <set>

#include "hpctrain/model/kv_cache.hpp"
#include "hpctrain/model/model.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::eval {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The next token of every row from the whole vocabulary's logits [B, V] (float32, CPU). Sampling
// draws from `gen` once per call for the whole batch, so the same logits give the same tokens.
std::vector<std::int64_t> choose(torch::Tensor logits, const GenerateOptions& o,
                                 at::Generator& gen) {
  torch::Tensor next;
  if (o.temperature == 0) {
    next = logits.argmax(-1);
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    logits = logits / o.temperature;
    const std::int64_t vocab = logits.size(-1);
    if (o.top_k > 0 && o.top_k < vocab) {
      const torch::Tensor kth = std::get<0>(logits.topk(o.top_k, -1)).narrow(-1, o.top_k - 1, 1);
      logits = logits.masked_fill(logits < kth, -inf);
    }
    if (o.top_p < 1.0) {
      // The smallest prefix of the tokens by probability whose mass reaches top_p (at least one).
      auto [sorted, order] = logits.sort(-1, /*descending=*/true);
      const torch::Tensor probs = torch::softmax(sorted, -1);
      const torch::Tensor before = probs.cumsum(-1) - probs;  // mass of the tokens before each
      sorted = sorted.masked_fill(before >= o.top_p, -inf);
      logits = torch::full_like(logits, -inf).scatter(-1, order, sorted);
    }
    next = torch::multinomial(torch::softmax(logits, -1), 1, false, gen).squeeze(-1);
  }
  next = next.contiguous();
  return {next.data_ptr<std::int64_t>(), next.data_ptr<std::int64_t>() + next.numel()};
}

// One batch of rows: the prompts, each row's budget of new tokens, and what it generated.
struct Rows {
  std::vector<std::vector<std::int64_t>> prompts;
  std::vector<std::int64_t> limit;  // new tokens allowed (max_new_tokens, or the context's end)
  std::vector<Continuation> out;
  std::vector<bool> done;
};

// Takes the chosen tokens of one step; returns whether every row is done.
bool take(Rows& rows, const std::vector<std::int64_t>& next, const GenerateOptions& o,
          const std::set<std::int64_t>& stops) {
  bool all = true;
  for (std::size_t b = 0; b < rows.out.size(); ++b) {
    if (rows.done[b]) continue;
    if (stops.count(next[b]) > 0) {
      rows.done[b] = true;
      rows.out[b].finish_reason = "stop";
      continue;
    }
    rows.out[b].tokens.push_back(next[b]);
    if (static_cast<std::int64_t>(rows.out[b].tokens.size()) >= rows.limit[b]) {
      rows.done[b] = true;
      rows.out[b].finish_reason = rows.limit[b] < o.max_new_tokens ? "context" : "length";
    }
    all = all && rows.done[b];
  }
  return all;
}

std::int64_t max_limit(const Rows& rows) {
  return rows.limit.empty() ? 0 : *std::max_element(rows.limit.begin(), rows.limit.end());
}

torch::Tensor cpu_logits(model::Model& model, const torch::Tensor& outputs) {
  return model::full_logits(model, outputs).to(torch::kCPU, torch::kFloat32);
}

// Prefill once (left-padded), then one position per step from the cache.
void decode_cached(model::Model& model, model::IncrementalDecoder& decoder, model::KvCache& cache,
                   Rows& rows, const GenerateOptions& o, at::Generator& gen,
                   const std::set<std::int64_t>& stops, const torch::Device& device,
                   const std::function<void()>& first_token) {
  const auto batch = static_cast<std::int64_t>(rows.prompts.size());
  const std::int64_t longest = cache.capacity() - max_limit(rows);
  torch::Tensor tokens = torch::zeros({batch, longest}, torch::kLong);
  for (std::int64_t b = 0; b < batch; ++b) {
    const auto& p = rows.prompts[static_cast<std::size_t>(b)];
    const auto n = static_cast<std::int64_t>(p.size());
    tokens[b].narrow(0, longest - n, n).copy_(torch::tensor(p, torch::kLong));
  }
  torch::Tensor outputs = decoder.forward_cached(tokens.to(device), cache);
  bool all =
      take(rows, choose(cpu_logits(model, outputs.select(1, longest - 1)), o, gen), o, stops);
  first_token();
  while (!all) {
    torch::Tensor step = torch::zeros({batch, 1}, torch::kLong);
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto& out = rows.out[static_cast<std::size_t>(b)].tokens;
      if (!rows.done[static_cast<std::size_t>(b)]) step[b][0] = out.back();
    }
    outputs = decoder.forward_cached(step.to(device), cache);
    all = take(rows, choose(cpu_logits(model, outputs.select(1, 0)), o, gen), o, stops);
  }
}

// Every step: forward() over each row's prompt and continuation, its last position's logits.
void decode_uncached(model::Model& model, Rows& rows, const GenerateOptions& o, at::Generator& gen,
                     const std::set<std::int64_t>& stops, const torch::Device& device,
                     const std::function<void()>& first_token) {
  const auto batch = static_cast<std::int64_t>(rows.prompts.size());
  bool all = false;
  bool first = true;
  while (!all) {
    std::vector<torch::Tensor> last(static_cast<std::size_t>(batch));
    std::int64_t vocab = 0;
    for (std::size_t b = 0; b < last.size(); ++b) {
      if (rows.done[b]) continue;
      std::vector<std::int64_t> seq = rows.prompts[b];
      seq.insert(seq.end(), rows.out[b].tokens.begin(), rows.out[b].tokens.end());
      const auto n = static_cast<std::int64_t>(seq.size());
      const torch::Tensor outputs =
          model.forward(torch::tensor(seq, torch::kLong).view({1, n}).to(device));
      last[b] = cpu_logits(model, outputs.select(1, n - 1)).squeeze(0);
      vocab = last[b].size(0);
    }
    for (auto& row : last) {
      if (!row.defined()) row = torch::zeros({vocab}, torch::kFloat32);  // a finished row
    }
    all = take(rows, choose(torch::stack(last), o, gen), o, stops);
    if (first) first_token();
    first = false;
  }
}

}  // namespace

void check_generate_options(const GenerateOptions& o, const std::string& prefix) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    throw ConfigError(str(prefix, "temperature ", o.temperature, ": must be >= 0 (0 = greedy)"));
  }
  if (o.top_k < 0) throw ConfigError(str(prefix, "top-k ", o.top_k, ": must be >= 0 (0 = all)"));
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    throw ConfigError(str(prefix, "top-p ", o.top_p, ": must be in (0, 1] (1 = all)"));
  }
  if (o.batch_size < 1)
    throw ConfigError(str(prefix, "batch-size ", o.batch_size, ": must be >= 1"));
  if (o.max_new_tokens < 0) {
    throw ConfigError(str(prefix, "max-new-tokens ", o.max_new_tokens, ": must be >= 0"));
  }
}

Generation generate(model::Model& model, const std::vector<std::vector<std::int64_t>>& prompts,
                    const GenerateOptions& o) {
  check_generate_options(o, "--");
  const auto start = Clock::now();
  const std::int64_t context = model::context_length(model);
  model::IncrementalDecoder* decoder = model::decoder_of(model);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto n = static_cast<std::int64_t>(prompts[i].size());
    if (n < 1) throw DataError(str("prompt ", i + 1, " is empty: it needs at least one token"));
    if (context > 0 && n >= context) {
      throw DataError(str("prompt ", i + 1, " has ", n, " tokens; the model reads at most ",
                          context,
                          " (model.seq_len), leaving no room for a new token: shorten it"));
    }
  }
  const bool was_training = model.is_training();
  model.eval();
  const auto device = model.parameters().front().device();
  auto gen = at::detail::createCPUGenerator(o.seed);
  const std::set<std::int64_t> stops(o.stop_tokens.begin(), o.stop_tokens.end());
  Generation result;
  bool first_seen = false;
  auto first_token = [&] {
    if (!first_seen) result.first_token_seconds = since(start);
    first_seen = true;
  };
  {
    torch::InferenceMode inference;
    for (std::size_t first = 0; first < prompts.size();
         first += static_cast<std::size_t>(o.batch_size)) {
      const std::size_t end =
          std::min(prompts.size(), first + static_cast<std::size_t>(o.batch_size));
      Rows rows;
      rows.prompts.assign(prompts.begin() + static_cast<std::ptrdiff_t>(first),
                          prompts.begin() + static_cast<std::ptrdiff_t>(end));
      std::int64_t longest = 0;
      for (const auto& p : rows.prompts) {
        const auto n = static_cast<std::int64_t>(p.size());
        longest = std::max(longest, n);
        rows.limit.push_back(context > 0 ? std::min(o.max_new_tokens, context - n)
                                         : o.max_new_tokens);
      }
      rows.out.resize(rows.prompts.size());
      rows.done.assign(rows.prompts.size(), false);
      for (std::size_t b = 0; b < rows.out.size(); ++b) {
        if (rows.limit[b] > 0) continue;
        rows.done[b] = true;
        rows.out[b].finish_reason = o.max_new_tokens == 0 ? "length" : "context";
      }
      if (std::all_of(rows.done.begin(), rows.done.end(), [](bool d) { return d; })) {
        result.continuations.insert(result.continuations.end(), rows.out.begin(), rows.out.end());
        continue;
      }
      std::unique_ptr<model::KvCache> cache;
      if (o.use_cache && decoder != nullptr) {
        torch::Tensor padding =
            torch::empty({static_cast<std::int64_t>(rows.prompts.size())}, torch::kLong);
        for (std::size_t b = 0; b < rows.prompts.size(); ++b) {
          padding[static_cast<std::int64_t>(b)] =
              longest - static_cast<std::int64_t>(rows.prompts[b].size());
        }
        cache = decoder->make_kv_cache(static_cast<std::int64_t>(rows.prompts.size()),
                                       longest + max_limit(rows), padding);
      }
      result.cached = cache != nullptr;
      if (cache) {
        decode_cached(model, *decoder, *cache, rows, o, gen, stops, device, first_token);
      } else {
        decode_uncached(model, rows, o, gen, stops, device, first_token);
      }
      result.continuations.insert(result.continuations.end(), rows.out.begin(), rows.out.end());
    }
  }
  model.train(was_training);
  for (const auto& c : result.continuations) {
    result.new_tokens += static_cast<std::int64_t>(c.tokens.size());
  }
  result.seconds = since(start);
  result.tokens_per_second = result.seconds > 0 ? result.new_tokens / result.seconds : 0;
  return result;
}

}  // namespace hpctrain::eval
