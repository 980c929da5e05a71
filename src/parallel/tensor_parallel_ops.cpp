#include "hpctrain/parallel/tensor_parallel_ops.hpp"

#include <atomic>

#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Nanoseconds and calls, as integers: atomic<double> has no fetch_add before C++20, and the
// backward may run on an autograd worker thread.
std::atomic<std::int64_t> g_comm_nanoseconds{0};
std::atomic<std::int64_t> g_comm_calls{0};

// AutogradContext::saved_data holds IValues only: the communicator travels to the backward in a
// capsule, which also keeps it alive for as long as the graph holds the node.
struct CommCapsule : torch::CustomClassHolder {
  explicit CommCapsule(CommPtr c) : comm(std::move(c)) {}
  CommPtr comm;
};

void save_comm(AutogradContext* ctx, const CommPtr& tp) {
  ctx->saved_data["tp"] = c10::IValue::make_capsule(c10::make_intrusive<CommCapsule>(tp));
}

comm::Communicator& saved_comm(AutogradContext* ctx) {
  auto holder = ctx->saved_data["tp"].toCapsule();
  return *static_cast<CommCapsule*>(holder.get())->comm;
}

// [.., n] per rank -> [.., size * n]: all_gather stacks along dim 0, so move the rank dimension
// next to the last one and merge the two (one copy, the one the gather needs anyway).
torch::Tensor all_gather_last_dim(const torch::Tensor& input, comm::Communicator& tp) {
  if (input.dim() == 0) {
    throw Error(str("gather along the last dim on group ", tp.name(), ": scalar input"));
  }
  torch::Tensor contiguous = input.contiguous();
  torch::Tensor stacked;
  {
    TpCommTimer timer;
    stacked = tp.all_gather(contiguous);  // [size * d0, ...]
  }
  std::vector<std::int64_t> shape = input.sizes().vec();
  shape.insert(shape.begin(), tp.size());
  torch::Tensor ranks_first = stacked.view(shape);  // [size, d0, ..., n]
  std::vector<std::int64_t> out_shape = input.sizes().vec();
  out_shape.back() *= tp.size();
  return ranks_first.movedim(0, -2).reshape(out_shape);
}

torch::Tensor split_last_dim(const torch::Tensor& input, comm::Communicator& tp) {
  const std::int64_t n = input.size(-1);
  if (n % tp.size() != 0) {
    throw Error(str("split along the last dim on group ", tp.name(), ": size ", n,
                    " is not divisible by the group size ", tp.size()));
  }
  const std::int64_t chunk = n / tp.size();
  return input.narrow(-1, tp.rank() * chunk, chunk);
}

class CopyToTpRegion : public torch::autograd::Function<CopyToTpRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, CommPtr tp) {
    save_comm(ctx, tp);
    return input;  // returned as a no-grad view of itself, with this node as its grad_fn
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    torch::Tensor grad = grads[0].clone();  // the incoming gradient may be shared with others
    TpCommTimer timer;
    saved_comm(ctx).all_reduce(grad, comm::ReduceOp::kSum);
    return {grad, torch::Tensor()};
  }
};

class ReduceFromTpRegion : public torch::autograd::Function<ReduceFromTpRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor input, CommPtr tp) {
    {
      TpCommTimer timer;
      tp->all_reduce(input, comm::ReduceOp::kSum);
    }
    // The reduction wrote through the data pointer: bump the version so that autograd refuses to
    // use the old values if anyone had saved them, and tell autograd the input was modified.
    input.unsafeGetTensorImpl()->bump_version();
    ctx->mark_dirty({input});
    return input;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

class GatherFromTpRegion : public torch::autograd::Function<GatherFromTpRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, CommPtr tp) {
    save_comm(ctx, tp);
    return all_gather_last_dim(input, *tp);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {split_last_dim(grads[0], saved_comm(ctx)), torch::Tensor()};
  }
};

class ScatterToTpRegion : public torch::autograd::Function<ScatterToTpRegion> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, CommPtr tp) {
    save_comm(ctx, tp);
    // A contiguous copy: the slice feeds a matmul, which would copy a strided slice anyway, and
    // a fresh tensor keeps later in-place operations on it legal.
    return split_last_dim(input, *tp).contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_gather_last_dim(grads[0], saved_comm(ctx)), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tp_region(const torch::Tensor& input, const CommPtr& tp) {
  if (!is_parallel(tp)) return input;
  return CopyToTpRegion::apply(input, tp);
}

torch::Tensor reduce_from_tp_region(torch::Tensor input, const CommPtr& tp) {
  if (!is_parallel(tp)) return input;
  return ReduceFromTpRegion::apply(input, tp);
}

torch::Tensor gather_from_tp_region(const torch::Tensor& input, const CommPtr& tp) {
  if (!is_parallel(tp)) return input;
  return GatherFromTpRegion::apply(input, tp);
}

torch::Tensor scatter_to_tp_region(const torch::Tensor& input, const CommPtr& tp) {
  if (!is_parallel(tp)) return input;
  return ScatterToTpRegion::apply(input, tp);
}

TpCommTimer::~TpCommTimer() {
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  g_comm_nanoseconds.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count(),
      std::memory_order_relaxed);
  g_comm_calls.fetch_add(1, std::memory_order_relaxed);
}

double tensor_parallel_comm_seconds() {
  return static_cast<double>(g_comm_nanoseconds.load(std::memory_order_relaxed)) * 1e-9;
}

std::int64_t tensor_parallel_comm_calls() {
  return g_comm_calls.load(std::memory_order_relaxed);
}

void reset_tensor_parallel_comm_seconds() {
  g_comm_nanoseconds.store(0, std::memory_order_relaxed);
  g_comm_calls.store(0, std::memory_order_relaxed);
}

void average_gradients(const std::vector<torch::Tensor>& params, comm::Communicator& tp) {
  if (tp.size() == 1) return;
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  // One flat buffer, one collective: these are small tensors (norms, biases, positions), where
  // per-call latency dominates.
  std::vector<torch::Tensor> flat;
  flat.reserve(grads.size());
  for (const auto& g : grads) flat.push_back(g.reshape(-1));
  torch::Tensor buffer = torch::cat(flat);
  tp.all_reduce(buffer, comm::ReduceOp::kAvg);
  std::int64_t offset = 0;
  for (auto& g : grads) {
    const std::int64_t n = g.numel();
    g.copy_(buffer.narrow(0, offset, n).view_as(g));
    offset += n;
  }
}

}  // namespace hpctrain::parallel
