#include "hpctrain/parallel/tensor_parallel_linear.hpp"

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {
namespace {

void require_divisible(std::int64_t n, std::int64_t by, const std::string& name, const char* what) {
  if (by <= 0 || n % by != 0) {
    throw ConfigError(str(name, ": ", what, " (", n, ") is not divisible by ", by,
                          "; choose sizes that divide by the tensor-parallel size"));
  }
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const ColumnParallelLinearOptions& options, CommPtr tp,
                                           const std::string& name, std::uint64_t seed)
    : options_(options), tp_(std::move(tp)) {
  const int tp_size = tp_size_of(tp_);
  const int tp_rank = tp_rank_of(tp_);
  const std::int64_t in = options.in_features();
  const std::int64_t out = options.out_features();
  const std::int64_t stacked = options.stacked();
  if (in < 1 || out < 1 || stacked < 1) {
    throw ConfigError(
        str(name, ": sizes must be positive (in ", in, ", out ", out, ", stacked ", stacked, ")"));
  }
  if (stacked > 1) {
    if (options.pad_outputs() || options.gather_output()) {
      throw ConfigError(str(name, ": stacked outputs cannot be padded or gathered"));
    }
    require_divisible(out, stacked, name, "out_features");
    require_divisible(out / stacked, tp_size, name, "out_features per stacked block");
    weight_shard_ = TensorShard{{stacked, out / stacked, in}, 1};
    bias_shard_ = TensorShard{{stacked, out / stacked}, 1};
  } else {
    if (options.pad_outputs() && options.gather_output()) {
      throw ConfigError(str(name, ": padded outputs cannot be gathered"));
    }
    if (!options.pad_outputs()) require_divisible(out, tp_size, name, "out_features");
    weight_shard_ = TensorShard{{out, in}, 0};
    bias_shard_ = TensorShard{{out}, 0};
  }
  local_out_ = stacked * shard_extent(out / stacked, tp_size);
  weight = register_parameter("weight", init_normal_shard(seed, name + ".weight", weight_shard_,
                                                          options.init_std(), tp_rank, tp_size));
  if (options.bias()) {
    bias = register_parameter("bias", torch::zeros(local_shape(bias_shard_, tp_size)));
  }
}

torch::Tensor ColumnParallelLinear::forward(const torch::Tensor& input) {
  torch::Tensor x = copy_to_tp_region(input, tp_);
  // Stacked parameters are contiguous [P, n, in]: viewing them as [P n, in] is free, and the
  // linear is a single addmm over every block.
  torch::Tensor w = options_.stacked() > 1 ? weight.reshape({local_out_, weight.size(-1)}) : weight;
  torch::Tensor y;
  if (bias.defined()) {
    y = torch::linear(x, w, options_.stacked() > 1 ? bias.reshape({local_out_}) : bias);
  } else {
    y = torch::linear(x, w);
  }
  return options_.gather_output() ? gather_from_tp_region(y, tp_) : y;
}

std::vector<std::pair<std::string, TensorShard>> ColumnParallelLinear::shards() const {
  std::vector<std::pair<std::string, TensorShard>> out{{"weight", weight_shard_}};
  if (bias.defined()) out.emplace_back("bias", bias_shard_);
  return out;
}

RowParallelLinear::RowParallelLinear(const RowParallelLinearOptions& options, CommPtr tp,
                                     const std::string& name, std::uint64_t seed)
    : options_(options), tp_(std::move(tp)) {
  const int tp_size = tp_size_of(tp_);
  const std::int64_t in = options.in_features();
  const std::int64_t out = options.out_features();
  if (in < 1 || out < 1) {
    throw ConfigError(str(name, ": sizes must be positive (in ", in, ", out ", out, ")"));
  }
  require_divisible(in, tp_size, name, "in_features");
  weight_shard_ = TensorShard{{out, in}, 1};
  bias_shard_ = TensorShard{{out}, -1};
  weight =
      register_parameter("weight", init_normal_shard(seed, name + ".weight", weight_shard_,
                                                     options.init_std(), tp_rank_of(tp_), tp_size));
  if (options.bias()) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor RowParallelLinear::forward(const torch::Tensor& input) {
  if (tp_size_of(tp_) == 1) {
    return bias.defined() ? torch::linear(input, weight, bias) : torch::linear(input, weight);
  }
  torch::Tensor x = options_.input_is_parallel() ? input : scatter_to_tp_region(input, tp_);
  // Partial products are summed in place (the mm output is fresh and read by no one else); the
  // bias goes in after the sum, once, so its gradient is identical on every tp rank.
  std::vector<std::int64_t> out_shape = x.sizes().vec();
  out_shape.back() = weight.size(0);
  torch::Tensor y = torch::mm(x.reshape({-1, x.size(-1)}), weight.t());
  y = reduce_from_tp_region(y, tp_);
  if (bias.defined()) y.add_(bias);
  return y.view(out_shape);
}

std::vector<std::pair<std::string, TensorShard>> RowParallelLinear::shards() const {
  std::vector<std::pair<std::string, TensorShard>> out{{"weight", weight_shard_}};
  if (bias.defined()) out.emplace_back("bias", bias_shard_);
  return out;
}

}  // namespace hpctrain::parallel
