#include "hpctrain/parallel/data_parallel_shards.hpp"

#include <algorithm>
#include <chrono>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

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

void DataParallelShards::scale_owned_grads(double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& range : owned_) flat_.grads().narrow(0, range.offset, range.numel).mul_(factor);
}

double DataParallelShards::all_gather_parameters() {
  if (dp_->size() == 1) return 0.0;
  const auto start = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  std::vector<comm::WorkHandle> works;
  for (const auto& bucket : buckets_) {
    works.push_back(
        dp_->all_gather_in_place_async(flat_.params().narrow(0, bucket.offset, bucket.numel)));
  }
  for (auto& work : works) work->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
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
    std::vector<comm::WorkHandle> works;
    for (const auto& bucket : buckets_) {
      works.push_back(dp_->all_gather_in_place_async(full.narrow(0, bucket.offset, bucket.numel)));
    }
    for (auto& work : works) work->wait();
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
