#include "hpctrain/parallel/flat_parameters.hpp"

#include <ATen/Parallel.h>

#include <algorithm>

#include "hpctrain/comm/host_value.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {

std::vector<int> bucket_entry_counts(const std::vector<std::int64_t>& numels,
                                     std::int64_t element_bytes, std::int64_t bucket_bytes,
                                     const std::vector<bool>& alone) {
  std::vector<int> counts;
  std::int64_t bucket_numel = 0;
  bool closed = false;  // the bucket being filled holds an entry that stays alone
  for (std::size_t i = 0; i < numels.size(); ++i) {
    const bool own = i < alone.size() && alone[i];
    if (counts.empty() || bucket_bytes == 0 || bucket_numel * element_bytes >= bucket_bytes ||
        closed || (own && counts.back() > 0)) {
      counts.push_back(0);
      bucket_numel = 0;
    }
    counts.back() += 1;
    bucket_numel += numels[i];
    closed = own;
  }
  return counts;
}

FlatParameters::FlatParameters(torch::nn::Module& module, FlatLayout layout) {
  auto named = module.named_parameters(/*recurse=*/true);
  if (named.size() == 0) throw Error("the model has no parameters to train");
  const auto options = named[0].value().options();
  if (layout.shard_count < 1) throw Error("FlatLayout::shard_count must be at least 1");
  std::int64_t total = 0;
  // Reverse registration order: backward produces the last layers' gradients first.
  for (std::size_t i = named.size(); i-- > 0;) {
    const auto& item = named[i];
    const torch::Tensor& p = item.value();
    if (p.scalar_type() != options.dtype().toScalarType() || p.device() != options.device()) {
      throw Error(str("parameter ", item.key(), " is ", p.scalar_type(), " on ", p.device(),
                      " but ", named[0].key(), " is ", options.dtype(), " on ", options.device(),
                      ": flat parameter storage needs one dtype and device"));
    }
    const bool own = std::find(layout.own_bucket.begin(), layout.own_bucket.end(), item.key()) !=
                     layout.own_bucket.end();
    entries_.push_back(Entry{item.key(), p, total, p.numel(), own});
    total += p.numel();
  }
  parameter_numel_ = total;
  if (layout.shard_count > 1) {
    // Shift entries so each bucket ends on a multiple of shard_count: the gaps are padding that
    // stays zero in parameters and gradients (and so in every optimizer state).
    std::vector<std::int64_t> numels;
    for (const auto& e : entries_) numels.push_back(e.numel);
    const auto counts = bucket_entry_counts(
        numels, static_cast<std::int64_t>(c10::elementSize(options.dtype().toScalarType())),
        layout.bucket_bytes, own_bucket_flags());
    std::size_t index = 0;
    total = 0;
    for (int count : counts) {
      for (int k = 0; k < count; ++k, ++index) {
        entries_[index].offset = total;
        total += entries_[index].numel;
      }
      total = (total + layout.shard_count - 1) / layout.shard_count * layout.shard_count;
    }
  }
  params_ =
      total == parameter_numel_ ? torch::empty({total}, options) : torch::zeros({total}, options);
  if (layout.gradients) grads_ = torch::zeros({total}, options);
  torch::NoGradGuard no_grad;
  for (auto& e : entries_) {
    auto shape = e.param.sizes().vec();
    auto view = params_.narrow(0, e.offset, e.numel).view(shape);
    view.copy_(e.param);
    // set_data swaps the storage under the same autograd variable: the module, the optimizer
    // and autograd keep using the parameter object, which now lives in the flat buffer.
    e.param.set_data(view);
    if (layout.gradients) e.param.mutable_grad() = grads_.narrow(0, e.offset, e.numel).view(shape);
  }
}

double FlatParameters::grad_square_sum(std::int64_t offset, std::int64_t numel) const {
  return square_sum(grads_.narrow(0, offset, numel));
}

// On a device: LibTorch's norm kernel over rows of 64 Ki elements (squares summed in float32
// within a row, reading the gradient once, in place), then the rows' norms squared and summed in
// float64. A float64 copy of the gradient would allocate and write twice its size (1 GB for a
// 124M-parameter model) every step. One host read, watched (comm/host_value.hpp).
double square_sum_by_rows(const torch::Tensor& g) {
  if (g.numel() == 0) return 0;
  constexpr std::int64_t kRow = 1 << 16;
  const torch::Tensor flat = g.reshape({-1});
  const std::int64_t rows = flat.numel() / kRow;
  const std::int64_t rest = flat.numel() - rows * kRow;
  const auto accumulate = g.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
  std::vector<torch::Tensor> norms;
  if (rows > 0) {
    norms.push_back(at::linalg_vector_norm(flat.narrow(0, 0, rows * kRow).view({rows, kRow}), 2,
                                           std::vector<std::int64_t>{1}, false, accumulate));
  }
  if (rest > 0) {
    norms.push_back(at::linalg_vector_norm(flat.narrow(0, rows * kRow, rest), 2,
                                           std::vector<std::int64_t>{0}, true, accumulate));
  }
  const torch::Tensor wide = torch::cat(norms).to(torch::kDouble);
  return comm::host_value<double>(wide.mul(wide).sum(), "gradient norm");
}

double square_sum(const torch::Tensor& g) {
  const std::int64_t numel = g.numel();
  if (!g.device().is_cpu()) return square_sum_by_rows(g);
  if (g.scalar_type() != torch::kFloat || !g.is_contiguous()) {
    return g.to(torch::kDouble).pow(2).sum().item<double>();
  }
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (numel + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  const float* data = g.data_ptr<float>();
  at::parallel_for(0, chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      // Eight interleaved accumulators: independent add chains the CPU can pipeline (and the
      // compiler can vectorise); the order is fixed, so the result is deterministic.
      double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const std::int64_t stop = std::min(numel, (c + 1) * kChunk);
      std::int64_t i = c * kChunk;
      for (; i + 8 <= stop; i += 8) {
        for (int k = 0; k < 8; ++k) {
          const double x = data[i + k];
          acc[k] += x * x;
        }
      }
      double sum = 0;
      for (; i < stop; ++i) sum += static_cast<double>(data[i]) * data[i];
      for (double a : acc) sum += a;
      partial[static_cast<std::size_t>(c)] = sum;
    }
  });
  double total = 0;
  for (double v : partial) total += v;  // fixed order
  return total;
}

FlatBuckets FlatParameters::buckets(std::int64_t bucket_bytes) const {
  // Consecutive entries fill a bucket until it reaches bucket_bytes (entries are in backward
  // order, so bucket 0 is ready first). The same grouping laid out the padding of a sharded flat
  // buffer, so a bucket runs up to the next bucket's first entry.
  FlatBuckets b;
  std::vector<std::int64_t> numels;
  for (const auto& e : entries_) numels.push_back(e.numel);
  const auto element = static_cast<std::int64_t>(params_.element_size());
  std::size_t first = 0;
  for (int count : bucket_entry_counts(numels, element, bucket_bytes, own_bucket_flags())) {
    b.offsets.push_back(entries_[first].offset);
    b.entry_counts.push_back(count);
    first += static_cast<std::size_t>(count);
  }
  for (std::size_t i = 0; i < b.offsets.size(); ++i) {
    const std::int64_t end = i + 1 < b.offsets.size() ? b.offsets[i + 1] : numel();
    b.sizes.push_back(end - b.offsets[i]);
  }
  return b;
}

std::vector<bool> FlatParameters::own_bucket_flags() const {
  std::vector<bool> flags;
  for (const auto& e : entries_) flags.push_back(e.own_bucket);
  return flags;
}

const FlatParameters::Entry& FlatParameters::entry(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.name == name) return e;
  }
  throw Error(str("no parameter named '", name, "'"));
}

}  // namespace hpctrain::parallel
