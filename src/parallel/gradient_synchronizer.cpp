#include "hpctrain/parallel/gradient_synchronizer.hpp"

#include <torch/csrc/autograd/function_hook.h>

#include <chrono>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {
namespace {

// Runs after AccumulateGrad has added this backward's contribution into the parameter's grad.
class SyncReadyHook : public torch::autograd::FunctionPostHook {
 public:
  SyncReadyHook(GradientSynchronizer* sync, std::size_t index) : sync_(sync), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    sync_->on_gradient_ready(index_);
    return outputs;
  }

 private:
  GradientSynchronizer* sync_;
  std::size_t index_;
};

}  // namespace

GradientSynchronizer::GradientSynchronizer(FlatParameters& flat,
                                           std::shared_ptr<comm::Communicator> dp,
                                           std::int64_t bucket_bytes, bool overlap,
                                           bool reduce_scatter)
    : flat_(flat), dp_(std::move(dp)), overlap_(overlap), reduce_scatter_(reduce_scatter) {
  const auto& entries = flat_.entries();
  const FlatBuckets buckets = flat_.buckets(bucket_bytes);
  bucket_offset_ = buckets.offsets;
  bucket_param_count_ = buckets.entry_counts;
  for (std::size_t b = 0; b < buckets.entry_counts.size(); ++b) {
    for (int k = 0; k < buckets.entry_counts[b]; ++k)
      bucket_of_entry_.push_back(static_cast<int>(b));
  }
  for (std::size_t b = 0; b < bucket_offset_.size(); ++b) {
    bucket_numel_.push_back(buckets.sizes[b]);
    if (reduce_scatter_ && bucket_numel_.back() % dp_->size() != 0) {
      throw Error(str("gradient bucket ", b, " holds ", bucket_numel_.back(),
                      " elements, not a multiple of the dp size ", dp_->size(),
                      ": build the flat parameters with FlatLayout{bucket_bytes, dp size}"));
    }
  }
  pending_ = bucket_param_count_;
  works_.resize(bucket_offset_.size());
  if (dp_->size() > 1) {
    for (std::size_t i = 0; i < entries.size(); ++i) {
      auto accumulator = torch::autograd::impl::grad_accumulator(entries[i].param);
      hook_keys_.push_back(accumulator->add_post_hook(std::make_unique<SyncReadyHook>(this, i)));
      accumulators_.push_back(std::move(accumulator));
    }
  }
}

GradientSynchronizer::~GradientSynchronizer() {
  // The hooks point at this object: detach them before it goes away.
  for (std::size_t i = 0; i < accumulators_.size(); ++i)
    accumulators_[i]->del_post_hook(hook_keys_[i]);
  for (auto& work : works_) {
    if (work) {
      try {
        work->wait();
      } catch (...) {  // the error was (or will be) reported by finish(); do not throw here
      }
    }
  }
}

void GradientSynchronizer::set_sync_enabled(bool enabled) {
  sync_enabled_ = enabled;
}

void GradientSynchronizer::prepare() {
  pending_ = bucket_param_count_;
  next_launch_ = 0;
  for (auto& work : works_) work.reset();
}

void GradientSynchronizer::on_gradient_ready(std::size_t entry_index) {
  if (!sync_enabled_ || !overlap_) return;
  const int bucket = bucket_of_entry_[entry_index];
  if (--pending_[bucket] == 0) launch_ready_buckets();
}

void GradientSynchronizer::launch_ready_buckets() {
  // In index order only: every rank must issue the same collectives in the same order, even if
  // its backward finished bucket 3 before bucket 2.
  while (next_launch_ < works_.size() && pending_[next_launch_] <= 0) {
    auto view = flat_.grads().narrow(0, bucket_offset_[next_launch_], bucket_numel_[next_launch_]);
    works_[next_launch_] = reduce_scatter_
                               ? dp_->reduce_scatter_in_place_async(view, comm::ReduceOp::kAvg)
                               : dp_->all_reduce_async(view, comm::ReduceOp::kAvg);
    ++next_launch_;
  }
}

double GradientSynchronizer::finish() {
  if (dp_->size() == 1 || !sync_enabled_) return 0.0;
  auto start = std::chrono::steady_clock::now();
  // Buckets whose parameters did not all take part in this backward (or everything, with overlap
  // off) are launched now; their unused gradients are zeros and average to zeros.
  for (auto& count : pending_) count = 0;
  launch_ready_buckets();
  for (auto& work : works_) {
    if (work) work->wait();
  }
  prepare();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void broadcast_parameters(FlatParameters& flat, comm::Communicator& group) {
  torch::NoGradGuard no_grad;
  group.broadcast(flat.params(), 0);
}

void broadcast_buffers(torch::nn::Module& module, comm::Communicator& group) {
  if (group.size() == 1) return;
  torch::NoGradGuard no_grad;
  for (auto& buffer : module.buffers(/*recurse=*/true)) {
    if (buffer.is_contiguous()) {
      group.broadcast(buffer, 0);
    } else {
      auto packed = buffer.contiguous();
      group.broadcast(packed, 0);
      buffer.copy_(packed);
    }
  }
}

}  // namespace hpctrain::parallel
