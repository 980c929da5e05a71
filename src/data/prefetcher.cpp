#include "hpctrain/data/prefetcher.hpp"

#include <chrono>

#include "hpctrain/runtime/clock.hpp"

namespace hpctrain::data {
namespace {
using Clock = std::chrono::steady_clock;
using runtime::seconds_since;
}  // namespace

Prefetcher::Prefetcher(Producer produce, int depth) : produce_(std::move(produce)), depth_(depth) {
  if (depth_ < 0) depth_ = 0;
  if (depth_ > 0) thread_ = std::thread([this] { run(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  // A produce() call in progress finishes first: the thread only checks stop_ between batches.
  if (thread_.joinable()) thread_.join();
}

void Prefetcher::run() {
  for (std::int64_t index = 0;; ++index) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Bounded memory: at most depth_ finished batches wait, plus the one being produced.
      cv_.wait(lock, [this] { return stop_ || static_cast<int>(ready_.size()) < depth_; });
      if (stop_) break;
    }
    Batch batch;
    bool more = false;
    try {
      more = produce_(index, batch);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
      finished_ = true;
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!more) {
      finished_ = true;
      cv_.notify_all();
      return;
    }
    ready_.push_back(std::move(batch));
    cv_.notify_all();
  }
}

bool Prefetcher::next(Batch& out) {
  const auto start = Clock::now();
  if (depth_ == 0) {
    // Inline: the training loop waits for the whole read.
    if (error_) std::rethrow_exception(error_);
    if (finished_) return false;
    bool more = false;
    try {
      more = produce_(next_inline_++, out);
    } catch (...) {
      error_ = std::current_exception();
      finished_ = true;
      wait_seconds_ += seconds_since(start);
      throw;
    }
    if (!more) finished_ = true;
    wait_seconds_ += seconds_since(start);
    return more;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !ready_.empty() || finished_; });
  wait_seconds_ += seconds_since(start);
  if (!ready_.empty()) {
    out = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    return true;
  }
  // Batches read before a failure are delivered first; then the reader's own exception (a
  // DataError naming the file, say) surfaces here, in the training thread.
  if (error_) std::rethrow_exception(error_);
  return false;
}

}  // namespace hpctrain::data
