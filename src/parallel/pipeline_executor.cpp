#include "hpctrain/parallel/pipeline_executor.hpp"

#include <chrono>
#include <string>

#include "hpctrain/runtime/collective_scope.hpp"
#include "hpctrain/runtime/error.hpp"
#include "hpctrain/runtime/strings.hpp"
#include "hpctrain/runtime/trace.hpp"

namespace hpctrain::parallel {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = plan::PipelineActionKind;

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

using Key = std::pair<int, int>;  // (micro-batch, chunk)
// What a rank holds of one micro-batch on one chunk between its actions.
struct Held {
  torch::Tensor input;     // received activation (the stage's input); its grad goes back
  torch::Tensor output;    // this stage's output (or the loss on the last stage)
  torch::Tensor received;  // the gradient of the output, once received
};

// One run of a rank's actions: what it holds between them, and its computations. The
// communication and its timing stay with PipelineExecutor::run.
class ScheduleRun {
 public:
  ScheduleRun(const plan::PipelineShape& shape, const PipelineStage& stage,
              torch::TensorOptions options)
      : shape_(shape),
        stage_(stage),
        options_(options),
        last_stage_(shape.stages() - 1),
        training_(!shape.forward_only) {}

  /// Runs forward action `a`; returns its seconds. Local.
  double forward(const plan::PipelineAction& a) {
    const Key key{a.micro_batch, a.chunk};
    Held& h = held_[key];
    if (a.stage > 0 && !h.input.defined()) {
      throw Error(str("pipeline: forward ", a.text(shape_.virtual_stages),
                      " before its input arrived (internal error)"));
    }
    if (a.stage > 0 && training_) h.input.requires_grad_(true);
    const auto t0 = Clock::now();
    torch::Tensor out = stage_.forward(a.micro_batch, a.chunk, h.input);
    const auto t1 = Clock::now();
    if (runtime::trace::on()) {
      runtime::trace::record(lane_of(a.stage), "forward", t0, t1, a.micro_batch);
    }
    if (training_ || a.stage < last_stage_) {
      h.output = out;
    } else {
      held_.erase(key);  // forward-only, last stage: done with this micro-batch
    }
    return seconds(t0, t1);
  }

  /// Runs backward action `a`; returns its seconds. Local.
  double backward(const plan::PipelineAction& a) {
    auto it = held_.find(Key{a.micro_batch, a.chunk});
    if (it == held_.end() || !it->second.output.defined()) {
      throw Error(str("pipeline: backward ", a.text(shape_.virtual_stages),
                      " before its forward (internal error)"));
    }
    Held& h = it->second;
    if (stage_.before_backward) stage_.before_backward(a.micro_batch, a.chunk);
    const auto t0 = Clock::now();
    if (a.stage == last_stage_) {
      h.output.backward();
    } else {
      if (!h.received.defined()) {
        throw Error(str("pipeline: backward ", a.text(shape_.virtual_stages),
                        " before its output's gradient arrived (internal error)"));
      }
      torch::Tensor grad = h.received.scalar_type() == h.output.scalar_type()
                               ? h.received
                               : h.received.to(h.output.scalar_type());
      torch::autograd::backward({h.output}, {grad});
    }
    const auto t1 = Clock::now();
    if (runtime::trace::on()) {
      runtime::trace::record(lane_of(a.stage), "backward", t0, t1, a.micro_batch);
    }
    h.output = torch::Tensor();
    h.received = torch::Tensor();
    if (a.stage == 0) held_.erase(it);  // nothing goes back from the first stage
    return seconds(t0, t1);
  }

  /// The consecutive joined messages from actions[i] on, as one batch of `dtype` tensors;
  /// advances `i` past them and sets `receives` when the batch receives. Local.
  std::vector<comm::P2PMessage> message_batch(const std::vector<plan::PipelineAction>& actions,
                                              std::size_t& i, torch::ScalarType dtype,
                                              bool& receives) {
    std::vector<comm::P2PMessage> batch;
    receives = false;
    do {
      const plan::PipelineAction& m = actions[i];
      const Key k{m.micro_batch, m.chunk};
      switch (m.kind) {
        case Kind::kSendActivation: {
          Held& h = held_.at(k);
          batch.push_back(comm::P2PMessage::send(h.output.detach().to(dtype).contiguous(), m.peer));
          if (!training_) held_.erase(k);  // nothing comes back
          break;
        }
        case Kind::kRecvActivation: {
          torch::Tensor buffer = torch::empty(stage_.activation_shape(m.micro_batch), options_);
          held_[k].input = buffer;
          batch.push_back(comm::P2PMessage::recv(buffer, m.peer));
          receives = true;
          break;
        }
        case Kind::kSendGradient: {
          Held& h = held_.at(k);
          torch::Tensor grad = h.input.grad();
          // A stage whose output does not depend on its input sends zeros.
          if (!grad.defined()) grad = torch::zeros_like(h.input);
          batch.push_back(comm::P2PMessage::send(grad.detach().to(dtype).contiguous(), m.peer));
          held_.erase(k);
          break;
        }
        case Kind::kRecvGradient: {
          torch::Tensor buffer = torch::empty(stage_.activation_shape(m.micro_batch), options_);
          held_[k].received = buffer;
          batch.push_back(comm::P2PMessage::recv(buffer, m.peer));
          receives = true;
          break;
        }
        default: break;
      }
      ++i;
    } while (i < actions.size() && actions[i].is_message() && actions[i].joined);
    return batch;
  }

  /// Micro-batches still held (none once the schedule ran). Local.
  std::size_t unfinished() const { return held_.size(); }

 private:
  // The trace shows each stage as a lane of its own, its forwards and backwards named by
  // micro-batch; the waits for neighbours go on the main lane.
  int lane_of(int model_stage) {
    auto it = lanes_.find(model_stage);
    if (it == lanes_.end()) {
      it = lanes_.emplace(model_stage, runtime::trace::lane(str("pipeline stage ", model_stage)))
               .first;
    }
    return it->second;
  }

  const plan::PipelineShape& shape_;
  const PipelineStage& stage_;
  torch::TensorOptions options_;
  const int last_stage_;
  const bool training_;
  std::map<int, int> lanes_;
  std::map<Key, Held> held_;
};

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<comm::Communicator> pp, torch::Device device,
                                   torch::ScalarType activation_dtype)
    : pp_(std::move(pp)), device_(device), dtype_(activation_dtype) {
  if (device_.is_cuda()) {
    device_timer_ =
        std::make_unique<comm::DeviceTimer>(true, device_.has_index() ? device_.index() : -1);
  }
}

PipelineTimes PipelineExecutor::run(const plan::PipelineSchedule& schedule,
                                    const PipelineStage& stage) {
  namespace trace = runtime::trace;
  const plan::PipelineShape& shape = schedule.shape;
  if (shape.pp != pp_->size() || schedule.ranks.size() != static_cast<std::size_t>(shape.pp)) {
    throw Error(str("a pipeline schedule for pp = ", shape.pp, " run on a pp group of ",
                    pp_->size(), " ranks (internal error)"));
  }
  const auto& actions = schedule.ranks[static_cast<std::size_t>(pp_->rank())];
  const auto options = torch::TensorOptions().dtype(dtype_).device(device_);
  ScheduleRun held(shape, stage, options);
  std::vector<comm::WorkHandle> sends;  // batches of sends only: waited for at the end
  std::vector<torch::Tensor> keep;      // their tensors, alive until then
  PipelineTimes times;
  const auto start = Clock::now();
  // On a GPU a receive's wait returns once the compute stream is ordered after it, without
  // waiting on the host: a host clock around it reads ~0. Marks on the compute stream before and
  // after each wait time how long the stream stalled there (the bubble), and the schedule's span
  // on the device; they are read once, at the end of the run.
  comm::DeviceTimer* device = device_timer_.get();
  const int device_start = device ? device->mark() : -1;
  std::size_t i = 0;
  while (i < actions.size()) {
    const plan::PipelineAction& a = actions[i];
    if (a.kind == Kind::kForward) {
      times.forward += held.forward(a);
      ++i;
      continue;
    }
    if (a.kind == Kind::kBackward) {
      times.backward += held.backward(a);
      ++i;
      continue;
    }
    bool receives = false;
    std::vector<comm::P2PMessage> batch = held.message_batch(actions, i, dtype_, receives);
    if (!receives) {
      for (const auto& m : batch) keep.push_back(m.tensor);
      sends.push_back(pp_->send_recv_async(std::move(batch)));
      continue;
    }
    const auto t0 = Clock::now();
    const int before = device ? device->mark() : -1;
    pp_->send_recv_async(std::move(batch))->wait();
    if (device) device->add(kDeviceWait, before, device->mark());
    const auto t1 = Clock::now();
    times.wait += seconds(t0, t1);
    if (trace::on()) trace::record(0, "pipeline wait", t0, t1);
  }
  const auto t0 = Clock::now();
  const int before = device ? device->mark() : -1;
  for (auto& work : sends) work->wait();
  if (device) device->add(kDeviceWait, before, device->mark());
  const auto t1 = Clock::now();
  times.wait += seconds(t0, t1);
  if (trace::on() && !sends.empty()) trace::record(0, "pipeline wait", t0, t1);
  times.wall = seconds(start, t1);
  if (device) {
    device->add(kDeviceWall, device_start, device->mark());
    comm::DeviceTimer::Seconds on_device;
    {
      // The host waits for the device here: watched like any read of a device value.
      runtime::HostSyncScope watch("pipeline timing events");
      on_device = device->resolve();
    }
    times.wait = on_device[kDeviceWait];
    times.wall = on_device[kDeviceWall];
  }
  if (held.unfinished() > 0) {
    throw Error(str("pipeline: ", held.unfinished(), " micro-batches left unfinished on pp rank ",
                    pp_->rank(), " (internal error)"));
  }
  return times;
}

}  // namespace hpctrain::parallel
