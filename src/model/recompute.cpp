#include "hpctrain/model/recompute.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>

#include "hpctrain/compat/torch_compat.hpp"

namespace hpctrain::model {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The function travels to backward inside the autograd context (as a capsule).
struct FnHolder : torch::CustomClassHolder {
  explicit FnHolder(RecomputedFn f) : fn(std::move(f)) {}
  RecomputedFn fn;
};

at::Generator default_generator(const torch::Device& device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device)
                          : at::detail::getDefaultCPUGenerator();
}

torch::Tensor rng_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_rng_state(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Autocast's thread state for both device types: on or off, and the dtype it casts to. The replay
// computes as forward computed (float16 for an fp16 run, not bfloat16), whatever the state is
// when backward runs.
struct AutocastState {
  bool cpu = false;
  at::ScalarType cpu_dtype = at::kBFloat16;
  bool cuda = false;
  at::ScalarType cuda_dtype = at::kBFloat16;

  static AutocastState now() {
    return {compat::cpu_autocast_enabled(), compat::cpu_autocast_dtype(),
            compat::cuda_autocast_enabled(), compat::cuda_autocast_dtype()};
  }
  void apply() const {
    compat::set_cpu_autocast(cpu, cpu_dtype);
    compat::set_cuda_autocast(cuda, cuda_dtype);
  }
  void save(AutogradContext* ctx) const {
    ctx->saved_data["autocast_cpu"] = cpu;
    ctx->saved_data["autocast_cpu_dtype"] = static_cast<int64_t>(cpu_dtype);
    ctx->saved_data["autocast_cuda"] = cuda;
    ctx->saved_data["autocast_cuda_dtype"] = static_cast<int64_t>(cuda_dtype);
  }
  static AutocastState saved(AutogradContext* ctx) {
    return {ctx->saved_data["autocast_cpu"].toBool(),
            static_cast<at::ScalarType>(ctx->saved_data["autocast_cpu_dtype"].toInt()),
            ctx->saved_data["autocast_cuda"].toBool(),
            static_cast<at::ScalarType>(ctx->saved_data["autocast_cuda_dtype"].toInt())};
  }
};

// Puts the generators (CPU, and the inputs' CUDA device) and autocast back as they were when
// forward ran, and restores the present ones when the recomputation ends, even on error.
class ReplayScope {
 public:
  ReplayScope(AutogradContext* ctx, const torch::Device& device)
      : device_(device),
        cpu_now_(rng_state(default_generator(torch::kCPU))),
        autocast_now_(AutocastState::now()) {
    set_rng_state(default_generator(torch::kCPU), ctx->saved_data["cpu_rng"].toTensor());
    if (device_.is_cuda()) {
      cuda_now_ = rng_state(default_generator(device_));
      set_rng_state(default_generator(device_), ctx->saved_data["cuda_rng"].toTensor());
    }
    AutocastState::saved(ctx).apply();
  }
  ~ReplayScope() {
    set_rng_state(default_generator(torch::kCPU), cpu_now_);
    if (device_.is_cuda()) set_rng_state(default_generator(device_), cuda_now_);
    autocast_now_.apply();
    compat::clear_autocast_cache();
  }

 private:
  torch::Device device_;
  torch::Tensor cpu_now_;
  torch::Tensor cuda_now_;
  AutocastState autocast_now_;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  // The inputs come as a TensorList: that is what autograd records as inputs (a std::vector
  // would be taken for a non-tensor argument).
  static variable_list forward(AutogradContext* ctx, at::TensorList input_list,
                               c10::intrusive_ptr<FnHolder> holder) {
    const variable_list inputs(input_list.begin(), input_list.end());
    const torch::Device device = inputs.at(0).device();
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    ctx->saved_data["cpu_rng"] = rng_state(default_generator(torch::kCPU));
    if (device.is_cuda()) ctx->saved_data["cuda_rng"] = rng_state(default_generator(device));
    AutocastState::now().save(ctx);
    ctx->save_for_backward(inputs);
    // Function::apply runs this with grad mode off: fn keeps no graph and no activations.
    return {holder->fn(inputs)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    auto holder = ctx->saved_data["fn"].toCapsule();
    auto* fn_holder = static_cast<FnHolder*>(holder.get());
    std::vector<torch::Tensor> inputs;
    for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
    torch::Tensor output;
    {
      ReplayScope replay(ctx, saved.at(0).device());
      torch::AutoGradMode grad_on(true);
      output = fn_holder->fn(inputs);
    }
    // A nested backward through the recomputed graph: parameter gradients accumulate into their
    // .grad as in an ordinary backward, the inputs' gradients are returned.
    torch::autograd::backward({output}, {grad_outputs.at(0)});
    variable_list grads;
    for (const auto& t : inputs) grads.push_back(t.requires_grad() ? t.grad() : torch::Tensor());
    grads.emplace_back();  // the function holder
    return grads;
  }
};

}  // namespace

torch::Tensor recompute(const RecomputedFn& fn, const std::vector<torch::Tensor>& inputs) {
  bool any_grad = false;
  for (const auto& t : inputs) any_grad = any_grad || t.requires_grad();
  if (!torch::GradMode::is_enabled() || !any_grad) return fn(inputs);
  auto holder = c10::make_intrusive<FnHolder>(fn);
  return RecomputeFunction::apply(at::TensorList(inputs), holder)[0];
}

}  // namespace hpctrain::model
