#include "hpctrain/parallel/gradient_finalizer.hpp"

#include "hpctrain/parallel/tensor_parallel_ops.hpp"

namespace hpctrain::parallel {

GradientFinalizer::GradientFinalizer(GradientSynchronizer& dp_sync,
                                     std::shared_ptr<comm::Communicator> tp,
                                     std::vector<torch::Tensor> replicated)
    : dp_sync_(dp_sync), tp_(std::move(tp)), replicated_(std::move(replicated)) {
  if (!tp_ || tp_->size() == 1) replicated_.clear();
}

void GradientFinalizer::set_stage_copies(std::shared_ptr<comm::Communicator> pp,
                                         std::vector<std::pair<torch::Tensor, int>> copies) {
  pp_ = std::move(pp);
  copies_ = std::move(copies);
}

double GradientFinalizer::finalize() {
  const double waited = dp_sync_.finish();
  if (!replicated_.empty()) {
    torch::NoGradGuard no_grad;
    average_gradients(replicated_, *tp_);
  }
  if (!copies_.empty()) {
    torch::NoGradGuard no_grad;
    std::vector<comm::P2PMessage> batch;
    std::vector<torch::Tensor> received;
    for (auto& [param, peer] : copies_) {
      torch::Tensor grad = param.mutable_grad();
      received.push_back(torch::empty_like(grad));
      batch.push_back(comm::P2PMessage::send(grad, peer));
      batch.push_back(comm::P2PMessage::recv(received.back(), peer));
    }
    // Every send is read before the additions below: the batch completes first.
    pp_->send_recv_async(std::move(batch))->wait();
    for (std::size_t i = 0; i < copies_.size(); ++i)
      copies_[i].first.mutable_grad().add_(received[i]);
  }
  return waited;
}

}  // namespace hpctrain::parallel
