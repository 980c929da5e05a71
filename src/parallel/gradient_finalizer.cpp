#include "hpctrain/parallel/gradient_finalizer.hpp"

#include "hpctrain/parallel/tensor_parallel_ops.hpp"

namespace hpctrain::parallel {

GradientFinalizer::GradientFinalizer(GradientSynchronizer& dp_sync,
                                     std::shared_ptr<comm::Communicator> tp,
                                     std::vector<torch::Tensor> replicated)
    : dp_sync_(dp_sync), tp_(std::move(tp)), replicated_(std::move(replicated)) {
  if (!tp_ || tp_->size() == 1) replicated_.clear();
}

double GradientFinalizer::finalize() {
  const double waited = dp_sync_.finish();
  if (!replicated_.empty()) {
    torch::NoGradGuard no_grad;
    average_gradients(replicated_, *tp_);
  }
  return waited;
}

}  // namespace hpctrain::parallel
