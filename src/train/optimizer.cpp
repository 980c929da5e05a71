#include "hpctrain/train/optimizer.hpp"

#include <ATen/Parallel.h>

#include <cmath>

#include "hpctrain/compat/torch_compat.hpp"
#include "hpctrain/runtime/config.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/log.hpp"
#include "hpctrain/runtime/strings.hpp"

namespace hpctrain::train {
namespace {

// Fused single-pass updates for contiguous float32 CPU buffers. The unfused form (one LibTorch
// operation per line of the update rule) makes ~10 passes over five parameter-sized arrays,
// which is memory-bound; one pass reads each array once. Every element is independent, so the
// result does not depend on how at::parallel_for splits the range.
constexpr std::int64_t kGrain = 1 << 15;

struct AdamArgs {
  float* p;
  const float* g;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, wd, step_size, inv_sqrt_bias2;
  bool decoupled;
};

// Plain loops over restrict pointers with the branch hoisted out, so the compiler vectorises
// them (sqrtps/divps: no -ffast-math needed, results stay IEEE-exact per element).
template <bool kDecoupled>
void adam_range(const AdamArgs& a, std::int64_t begin, std::int64_t end) {
  float* __restrict p = a.p;
  const float* __restrict g = a.g;
  float* __restrict m = a.m;
  float* __restrict v = a.v;
  const float b1 = a.beta1, b2 = a.beta2, c1 = 1.0f - a.beta1, c2 = 1.0f - a.beta2;
  const float wd = a.wd, decay = 1.0f - a.lr * a.wd, step = a.step_size;
  const float inv = a.inv_sqrt_bias2, eps = a.eps;
  for (std::int64_t i = begin; i < end; ++i) {
    float grad = g[i];
    float param = p[i];
    if (kDecoupled) {
      param *= decay;
    } else {
      grad += wd * param;
    }
    const float mi = b1 * m[i] + c1 * grad;
    const float vi = b2 * v[i] + c2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] = param - step * mi / (std::sqrt(vi) * inv + eps);
  }
}

void fused_adam(const AdamArgs& a, std::int64_t n) {
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (a.decoupled) {
      adam_range<true>(a, begin, end);
    } else {
      adam_range<false>(a, begin, end);
    }
  });
}

template <bool kMomentum, bool kNesterov>
void sgd_range(float* __restrict p, const float* __restrict g, float* __restrict buf,
               std::int64_t begin, std::int64_t end, float lr, float wd, float momentum,
               bool first) {
  for (std::int64_t i = begin; i < end; ++i) {
    float d = g[i] + wd * p[i];
    if (kMomentum) {
      const float b = first ? d : momentum * buf[i] + d;
      buf[i] = b;
      d = kNesterov ? d + momentum * b : b;
    }
    p[i] -= lr * d;
  }
}

void fused_sgd(float* p, const float* g, float* buf, std::int64_t n, float lr, float wd,
               float momentum, bool nesterov, bool first) {
  at::parallel_for(0, n, kGrain, [&](std::int64_t begin, std::int64_t end) {
    if (!buf) {
      sgd_range<false, false>(p, g, buf, begin, end, lr, wd, momentum, first);
    } else if (nesterov) {
      sgd_range<true, true>(p, g, buf, begin, end, lr, wd, momentum, first);
    } else {
      sgd_range<true, false>(p, g, buf, begin, end, lr, wd, momentum, first);
    }
  });
}

bool fusable(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

}  // namespace

OptimizerConfig OptimizerConfig::from(ConfigSection& s) {
  OptimizerConfig c;
  c.kind = s.get_choice<OptimizerKind>("name", c.kind,
                                       {{"sgd", OptimizerKind::kSgd},
                                        {"adam", OptimizerKind::kAdam},
                                        {"adamw", OptimizerKind::kAdamW}});
  c.lr = s.get<double>("lr", c.lr);
  c.momentum = s.get<double>("momentum", c.momentum);
  c.nesterov = s.get<bool>("nesterov", c.nesterov);
  c.weight_decay = s.get<double>("weight_decay", c.kind == OptimizerKind::kAdamW ? 0.01 : 0.0);
  auto betas = s.get<std::vector<double>>("betas", {c.beta1, c.beta2});
  c.eps = s.get<double>("eps", c.eps);
  c.grad_clip = s.get<double>("grad_clip", c.grad_clip);
  c.grad_accumulation = s.get<int>("grad_accumulation", c.grad_accumulation);
  c.on_nonfinite = s.get_choice<NonFinitePolicy>(
      "on_nonfinite", c.on_nonfinite,
      {{"stop", NonFinitePolicy::kStop}, {"skip", NonFinitePolicy::kSkip}});
  if (!(c.lr > 0) || !std::isfinite(c.lr)) s.fail("lr", "must be a positive number");
  if (c.momentum < 0 || c.momentum >= 1) s.fail("momentum", "must be in [0, 1)");
  if (c.nesterov && c.momentum == 0)
    s.fail("nesterov", "Nesterov momentum needs optim.momentum > 0");
  if (c.nesterov && c.kind != OptimizerKind::kSgd) s.fail("nesterov", "applies to sgd only");
  if (c.weight_decay < 0) s.fail("weight_decay", "must be >= 0");
  if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1) {
    s.fail("betas", "must be two numbers in [0, 1), e.g. [0.9, 0.999]");
  }
  c.beta1 = betas[0];
  c.beta2 = betas[1];
  if (!(c.eps > 0)) s.fail("eps", "must be positive");
  if (c.grad_clip < 0) s.fail("grad_clip", "must be >= 0 (0 turns clipping off)");
  if (c.grad_accumulation < 1) s.fail("grad_accumulation", "must be at least 1");
  c.loss_scale = LossScaleConfig::from(s);
  return c;
}

Optimizer::Optimizer(std::vector<parallel::OptimizerSegment> segments,
                     const OptimizerConfig& config, bool sharded)
    : segments_(std::move(segments)), config_(config), sharded_(sharded) {
  if (segments_.empty()) throw Error("the optimizer has no parameters to update");
  std::int64_t state_numel = 0;
  for (const auto& s : segments_) state_numel += s.params.numel();
  const auto options = segments_.front().params.options();
  if (config_.kind == OptimizerKind::kSgd) {
    if (config_.momentum > 0) momentum_ = torch::zeros({state_numel}, options);
  } else {
    exp_avg_ = torch::zeros({state_numel}, options);
    exp_avg_sq_ = torch::zeros({state_numel}, options);
  }
  const torch::Tensor& first = segments_.front().params;
  if (config_.kind != OptimizerKind::kSgd) {
    bool uniform = true;  // the fused kernel takes lists of one dtype and device
    for (const auto& s : segments_) {
      uniform = uniform && s.params.scalar_type() == first.scalar_type() &&
                s.grads.scalar_type() == first.scalar_type() && s.params.device() == first.device();
    }
    if (uniform &&
        compat::choose_adam_kernel(first.device().type(), first.scalar_type(),
                                   first.is_contiguous()) == compat::AdamKernel::kFusedDevice) {
      fused_ = true;
      step_count_ = torch::zeros({}, options.dtype(torch::kFloat));
    }
  }
  if (!fusable(first) && !fused_) scratch_ = torch::empty({state_numel}, options);
}

bool Optimizer::fusable_cpu() const {
  return fusable(segments_.front().params);
}

bool Optimizer::fused_step(double lr) {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
  std::int64_t state_offset = 0;
  for (const auto& segment : segments_) {
    const std::int64_t numel = segment.params.numel();
    if (numel > 0) {
      params.push_back(segment.params);
      grads.push_back(segment.grads);
      exp_avgs.push_back(exp_avg_.narrow(0, state_offset, numel));
      exp_avg_sqs.push_back(exp_avg_sq_.narrow(0, state_offset, numel));
    }
    state_offset += numel;
  }
  step_count_.fill_(static_cast<double>(steps_));  // queued on the device: no host wait
  try {
    compat::fused_adam_step(params, grads, exp_avgs, exp_avg_sqs, step_count_, lr, config_.beta1,
                            config_.beta2, config_.weight_decay, config_.eps,
                            config_.kind == OptimizerKind::kAdamW);
    return true;
  } catch (const c10::Error& e) {
    // LibTorch checks the lists before it launches anything: nothing was updated yet.
    log::rank_warn(str("optimizer: LibTorch's fused Adam kernel refused the parameters (",
                       e.what_without_backtrace(), "); using the unfused update from now on"));
    fused_ = false;
    scratch_ = torch::empty({state_offset}, segments_.front().params.options());
    return false;
  }
}

void Optimizer::step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  if (fused_ && fused_step(lr)) return;
  std::int64_t state_offset = 0;
  for (const auto& segment : segments_) {
    if (segment.params.numel() > 0) step_segment(segment, state_offset, lr);
    state_offset += segment.params.numel();
  }
}

void Optimizer::step_segment(const parallel::OptimizerSegment& segment, std::int64_t state_offset,
                             double lr) {
  const double wd = config_.weight_decay;
  const std::int64_t numel = segment.params.numel();
  if (fusable(segment.params) && fusable(segment.grads)) {
    const auto n = numel;
    float* p = segment.params.data_ptr<float>();
    const float* g = segment.grads.data_ptr<float>();
    if (config_.kind == OptimizerKind::kSgd) {
      fused_sgd(p, g, momentum_.defined() ? momentum_.data_ptr<float>() + state_offset : nullptr, n,
                static_cast<float>(lr), static_cast<float>(wd),
                static_cast<float>(config_.momentum), config_.nesterov, steps_ == 1);
    } else {
      const double bias1 = 1 - std::pow(config_.beta1, static_cast<double>(steps_));
      const double bias2 = 1 - std::pow(config_.beta2, static_cast<double>(steps_));
      AdamArgs args{p,
                    g,
                    exp_avg_.data_ptr<float>() + state_offset,
                    exp_avg_sq_.data_ptr<float>() + state_offset,
                    static_cast<float>(lr),
                    static_cast<float>(config_.beta1),
                    static_cast<float>(config_.beta2),
                    static_cast<float>(config_.eps),
                    static_cast<float>(wd),
                    static_cast<float>(lr / bias1),
                    static_cast<float>(1.0 / std::sqrt(bias2)),
                    config_.kind == OptimizerKind::kAdamW};
      fused_adam(args, n);
    }
    return;
  }
  torch::Tensor p = segment.params;
  torch::Tensor g = segment.grads;
  torch::Tensor scratch = scratch_.narrow(0, state_offset, numel);
  if (config_.kind == OptimizerKind::kSgd) {
    // torch.optim.SGD (dampening 0): d = g + wd p; buf = m buf + d; d = nesterov ? d + m buf : buf.
    torch::Tensor d = g;
    if (wd != 0) d = torch::add_out(scratch, g, p, wd);
    if (config_.momentum > 0) {
      torch::Tensor momentum = momentum_.narrow(0, state_offset, numel);
      if (steps_ == 1) {
        momentum.copy_(d);
      } else {
        momentum.mul_(config_.momentum).add_(d);
      }
      if (config_.nesterov) {
        d = torch::add_out(scratch, d, momentum, config_.momentum);
      } else {
        d = momentum;
      }
    }
    p.add_(d, -lr);
    return;
  }
  // torch.optim.Adam / AdamW.
  torch::Tensor exp_avg = exp_avg_.narrow(0, state_offset, numel);
  torch::Tensor exp_avg_sq = exp_avg_sq_.narrow(0, state_offset, numel);
  torch::Tensor grad = g;
  if (config_.kind == OptimizerKind::kAdamW) {
    if (wd != 0) p.mul_(1 - lr * wd);
  } else if (wd != 0) {
    grad = torch::add_out(scratch, g, p, wd);
  }
  exp_avg.mul_(config_.beta1).add_(grad, 1 - config_.beta1);
  exp_avg_sq.mul_(config_.beta2).addcmul_(grad, grad, 1 - config_.beta2);
  const double bias1 = 1 - std::pow(config_.beta1, static_cast<double>(steps_));
  const double bias2 = 1 - std::pow(config_.beta2, static_cast<double>(steps_));
  torch::sqrt_out(scratch, exp_avg_sq);
  scratch.div_(std::sqrt(bias2)).add_(config_.eps);
  p.addcdiv_(exp_avg, scratch, -lr / bias1);
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  if (exp_avg_.defined()) out.emplace_back("exp_avg", exp_avg_);
  if (exp_avg_sq_.defined()) out.emplace_back("exp_avg_sq", exp_avg_sq_);
  if (momentum_.defined()) out.emplace_back("momentum_buffer", momentum_);
  return out;
}

}  // namespace hpctrain::train
