#include "hpctrain/parallel/data_parallel_strategy.hpp"

#include <algorithm>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "strategy_internal.hpp"

namespace hpctrain::parallel {
namespace {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  ReadyHook(std::function<void(std::size_t)>* ready, std::size_t index)
      : ready_(ready), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    (*ready_)(index_);
    return outputs;
  }

 private:
  std::function<void(std::size_t)>* ready_;
  std::size_t index_;
};

}  // namespace

GradientReadyHooks::~GradientReadyHooks() {
  // The hooks point at the callback this object holds: detach them before it goes away.
  for (std::size_t i = 0; i < accumulators_.size(); ++i) accumulators_[i]->del_post_hook(keys_[i]);
}

void GradientReadyHooks::install(const std::vector<torch::Tensor>& params,
                                 std::function<void(std::size_t)> ready) {
  ready_ = std::make_unique<std::function<void(std::size_t)>>(std::move(ready));
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto accumulator = torch::autograd::impl::grad_accumulator(params[i]);
    keys_.push_back(accumulator->add_post_hook(std::make_unique<ReadyHook>(ready_.get(), i)));
    accumulators_.push_back(std::move(accumulator));
  }
}

std::vector<UnitSpan> layout_units(const std::vector<std::vector<std::int64_t>>& numels,
                                   int shard_count) {
  if (shard_count < 1) throw Error("layout_units: the shard count must be at least 1");
  std::vector<UnitSpan> out;
  for (const auto& members : numels) {
    UnitSpan span;
    std::int64_t n = 0;
    for (auto m : members) {
      span.offsets.push_back(n);
      n += m;
    }
    span.numel = (std::max<std::int64_t>(n, 1) + shard_count - 1) / shard_count * shard_count;
    span.chunk = span.numel / shard_count;
    out.push_back(std::move(span));
  }
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> packed_overlap(
    const std::vector<std::pair<std::int64_t, std::int64_t>>& ranges, std::int64_t offset,
    std::int64_t numel) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  std::int64_t packed = 0;
  for (const auto& [begin, n] : ranges) {
    const std::int64_t lo = std::max(begin, offset);
    const std::int64_t hi = std::min(begin + n, offset + numel);
    if (lo < hi) out.emplace_back(packed + (lo - begin), hi - lo);
    packed += n;
  }
  return out;
}

void average_packed_pieces(torch::Tensor& packed,
                           const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces,
                           comm::Communicator& tp) {
  if (tp.size() == 1 || pieces.empty()) return;
  torch::NoGradGuard no_grad;
  // One buffer, one collective: these are small (norms, biases, positions).
  std::vector<torch::Tensor> parts;
  for (const auto& [at, n] : pieces) parts.push_back(packed.narrow(0, at, n));
  torch::Tensor buffer = torch::cat(parts);
  tp.all_reduce(buffer, comm::ReduceOp::kAvg);
  std::int64_t offset = 0;
  for (auto& part : parts) {
    part.copy_(buffer.narrow(0, offset, part.numel()));
    offset += part.numel();
  }
}

void OwnedGradientReductions::launch(torch::Tensor buffer, std::int64_t packed_offset,
                                     std::int64_t chunk) {
  comm::WorkHandle work;
  if (group_->size() > 1)
    work = group_->reduce_scatter_in_place_async(buffer, comm::ReduceOp::kAvg);
  in_flight_.push_back({std::move(buffer), std::move(work), packed_offset, chunk});
  while (in_flight_.size() > 2) retire();
}

void OwnedGradientReductions::drain() {
  while (!in_flight_.empty()) retire();
}

void OwnedGradientReductions::abandon() noexcept {
  for (auto& f : in_flight_) {
    try {
      if (f.work) f.work->wait();
    } catch (...) {  // reported by the step that failed; do not throw here
    }
  }
  in_flight_.clear();
}

void OwnedGradientReductions::retire() {
  InFlight f = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (f.work) f.work->wait();
  torch::NoGradGuard no_grad;
  owned_.narrow(0, f.packed_offset, f.chunk)
      .add_(f.buffer.narrow(0, group_->rank() * f.chunk, f.chunk));
}

double count_replicated_once(double sq, const torch::Tensor& packed,
                             const std::vector<std::pair<std::int64_t, std::int64_t>>& pieces,
                             int tp) {
  if (tp == 1) return sq;
  for (const auto& [at, n] : pieces) {
    sq -= (1.0 - 1.0 / tp) * square_sum(packed.narrow(0, at, n));
  }
  return sq < 0 ? 0.0 : sq;
}

void average_over_replicas(const std::vector<torch::Tensor>& tensors,
                           const std::shared_ptr<comm::Communicator>& replica) {
  if (!replica || replica->size() == 1 || tensors.empty()) return;
  torch::NoGradGuard no_grad;
  if (tensors.size() == 1 && tensors[0].is_contiguous()) {
    torch::Tensor t = tensors[0];
    replica->all_reduce(t, comm::ReduceOp::kAvg);
    return;
  }
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  torch::Tensor buffer = torch::cat(flat);
  replica->all_reduce(buffer, comm::ReduceOp::kAvg);
  std::int64_t offset = 0;
  for (const auto& t : tensors) {
    t.copy_(buffer.narrow(0, offset, t.numel()).view_as(t));
    offset += t.numel();
  }
}

std::unique_ptr<DataParallelStrategy> make_strategy(StrategyInputs inputs) {
  if (!inputs.shard || inputs.config.shard == ShardMode::kNone) {
    inputs.shard = inputs.dp;  // none replicates everything: no groups
    inputs.replica = nullptr;
    inputs.shard_control = inputs.dp_control;
  }
  if (inputs.config.shard == ShardMode::kFull)
    return make_fully_sharded_strategy(std::move(inputs));
  return make_flat_strategy(std::move(inputs));
}

}  // namespace hpctrain::parallel
