#pragma once
// Host-to-device copies on a CUDA stream of their own (docs/ARCHITECTURE.md, "One training
// step"): the training loader's reader thread starts the copy of a pinned batch as soon as it is
// read, so it runs while the device computes the steps before; the step orders its compute
// stream after the copy (an event, no host wait) before using the batch.

#include <torch/torch.h>

#include <memory>

namespace hpctrain::comm {

class DeviceCopier {
 public:
  /// Whether this build can copy on a stream of its own (it has the CUDA runtime). Local.
  static bool available();
  /// For CUDA device `device`. Throws CommError where !available(). Local.
  explicit DeviceCopier(torch::Device device);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  /// Starts copying `host` (pinned, contiguous) into a new tensor on the device and returns it;
  /// the copy is ordered on the copier's stream only: call ready() and wait() before using it.
  /// One calling thread at a time. Local.
  torch::Tensor start(const torch::Tensor& host);
  /// A marker after every copy started so far. Local.
  std::shared_ptr<void> ready();
  /// Orders the compute (default) stream after `marker`; the host does not wait. Local.
  static void wait(const std::shared_ptr<void>& marker);

 private:
  struct Stream;
  std::unique_ptr<Stream> stream_;
};

}  // namespace hpctrain::comm
