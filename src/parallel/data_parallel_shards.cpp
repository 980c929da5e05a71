#include "hpctrain/parallel/data_parallel_shards.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"

namespace hpctrain::parallel {

DataParallelShards::DataParallelShards(FlatParameters& flat,
                                       const std::vector<std::int64_t>& bucket_offsets,
                                       const std::vector<std::int64_t>& bucket_sizes,
                                       std::shared_ptr<comm::Communicator> dp)
    : flat_(flat), dp_(std::move(dp)) {
  const int size = dp_->size();
  const int rank = dp_->rank();
  for (std::size_t b = 0; b < bucket_offsets.size(); ++b) {
    if (bucket_sizes[b] % size != 0) {
      throw Error(str("gradient bucket ", b, " holds ", bucket_sizes[b],
                      " elements, not a multiple of the dp size ", size,
                      ": build the flat parameters with FlatLayout{bucket_bytes, dp size}"));
    }
    const std::int64_t chunk = bucket_sizes[b] / size;
    buckets_.push_back({bucket_offsets[b], bucket_sizes[b]});
    owned_.push_back({bucket_offsets[b] + rank * chunk, chunk});
    owned_numel_ += chunk;
  }
  gathers_.resize(buckets_.size());
}

double DataParallelShards::owned_grad_square_sum(const std::vector<std::size_t>& weighted,
                                                 double weight) const {
  double sum = 0;
  for (const auto& range : owned_) sum += flat_.grad_square_sum(range.offset, range.numel);
  if (weighted.empty() || weight == 1.0) return sum;
  // The owned part of each weighted entry counts `weight` times: correct its plain count.
  const auto& entries = flat_.entries();
  for (auto index : weighted) {
    const auto& e = entries[index];
    for (const auto& range : owned_) {
      const std::int64_t begin = std::max(e.offset, range.offset);
      const std::int64_t end = std::min(e.offset + e.numel, range.offset + range.numel);
      if (begin < end) sum -= (1.0 - weight) * flat_.grad_square_sum(begin, end - begin);
    }
  }
  // Rounding of the corrections may leave a tiny negative sum; a NaN (an overflowed gradient
  // times zero) must stay NaN, which std::max(0.0, NaN) would turn into 0.
  return sum < 0 ? 0.0 : sum;
}

double DataParallelShards::owned_entry_square_sum(std::size_t index) const {
  const auto& e = flat_.entries().at(index);
  double sum = 0;
  for (const auto& range : owned_) {
    const std::int64_t begin = std::max(e.offset, range.offset);
    const std::int64_t end = std::min(e.offset + e.numel, range.offset + range.numel);
    if (begin < end) sum += flat_.grad_square_sum(begin, end - begin);
  }
  return sum;
}

void DataParallelShards::scale_owned_grads(double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& range : owned_) flat_.grads().narrow(0, range.offset, range.numel).mul_(factor);
}

std::vector<comm::WorkHandle> DataParallelShards::launch_bucket_gathers(
    const torch::Tensor& flat_tensor) {
  std::vector<comm::WorkHandle> works(buckets_.size());
  // The flat layout is in reverse registration order (backward's order), so the last bucket
  // holds the first layers: gather it first, as forward reads it first.
  for (std::size_t b = buckets_.size(); b-- > 0;) {
    works[b] = dp_->all_gather_in_place_async(
        flat_tensor.narrow(0, buckets_[b].offset, buckets_[b].numel));
  }
  return works;
}

void DataParallelShards::start_parameter_gather() {
  if (dp_->size() == 1) return;
  // A gather still in flight from an earlier start would be overwritten by this one: finish it.
  wait_parameters();
  torch::NoGradGuard no_grad;
  gathers_ = launch_bucket_gathers(flat_.params());
  pending_ = gathers_.size();
}

void DataParallelShards::wait_parameter(const torch::Tensor& parameter) {
  if (pending_ == 0) return;
  const torch::Tensor& params = flat_.params();
  const auto element = static_cast<std::uintptr_t>(params.element_size());
  const auto base = reinterpret_cast<std::uintptr_t>(params.data_ptr());
  const auto at = reinterpret_cast<std::uintptr_t>(parameter.data_ptr());
  const auto offset = at < base ? flat_.numel() : static_cast<std::int64_t>((at - base) / element);
  if (parameter.dtype() != params.dtype() || parameter.device() != params.device() ||
      offset >= flat_.numel()) {
    wait_parameters();  // not a view into the flat parameters: wait for everything
    return;
  }
  const std::int64_t end = offset + parameter.numel();
  const auto start = std::chrono::steady_clock::now();
  bool waited = false;
  // Buckets tile the flat buffer in increasing offset: start at the one holding `offset`.
  auto first = std::upper_bound(buckets_.begin(), buckets_.end(), offset,
                                [](std::int64_t at, const FlatRange& r) { return at < r.offset; });
  if (first != buckets_.begin()) --first;
  for (auto b = static_cast<std::size_t>(first - buckets_.begin());
       b < buckets_.size() && buckets_[b].offset < end; ++b) {
    const auto& bucket = buckets_[b];
    if (!gathers_[b] || bucket.offset + bucket.numel <= offset) continue;
    gathers_[b]->wait();
    gathers_[b] = nullptr;
    --pending_;
    waited = true;
  }
  if (waited && runtime::trace::on()) {
    runtime::trace::record(0, "parameter gather wait", start, std::chrono::steady_clock::now());
  }
}

double DataParallelShards::wait_parameters() {
  if (pending_ == 0) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  // In launch order (last bucket first), the order the communication thread completes them.
  for (std::size_t b = buckets_.size(); b-- > 0;) {
    if (!gathers_[b]) continue;
    gathers_[b]->wait();
    gathers_[b] = nullptr;
    --pending_;
  }
  const auto finish = std::chrono::steady_clock::now();
  if (runtime::trace::on()) runtime::trace::record(0, "parameter gather wait", start, finish);
  return std::chrono::duration<double>(finish - start).count();
}

torch::Tensor DataParallelShards::gather_state(const torch::Tensor& packed) {
  torch::NoGradGuard no_grad;
  torch::Tensor full = torch::zeros({flat_.numel()}, packed.options());
  std::int64_t at = 0;
  for (const auto& range : owned_) {
    full.narrow(0, range.offset, range.numel).copy_(packed.narrow(0, at, range.numel));
    at += range.numel;
  }
  if (dp_->size() > 1) {
    for (auto& work : launch_bucket_gathers(full)) work->wait();
  }
  return full;
}

void DataParallelShards::scatter_state(const torch::Tensor& full, torch::Tensor& packed) const {
  torch::NoGradGuard no_grad;
  std::int64_t at = 0;
  for (const auto& range : owned_) {
    packed.narrow(0, at, range.numel).copy_(full.narrow(0, range.offset, range.numel));
    at += range.numel;
  }
}

}  // namespace hpctrain::parallel
