#pragma once
// Background reading: a thread reads the next K batches while the current step computes. Memory
// is bounded by K batches; an error in the reader is rethrown, with its message, by next().

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "hpctrain/data/dataset.hpp"

namespace hpctrain::data {

class Prefetcher {
 public:
  /// `produce(i)` returns batch i (called in order i = 0, 1, 2, ... from the background thread);
  /// it returns false when there are no more batches. depth = K >= 1. depth 0 reads inline in
  /// next() (no thread). Local.
  using Producer = std::function<bool(std::int64_t index, Batch& out)>;
  Prefetcher(Producer produce, int depth);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// The next batch; false at the end. Blocks while the reader is behind and adds the blocked
  /// time to wait_seconds(). Rethrows a reader error. Local.
  bool next(Batch& out);
  /// Total seconds next() spent waiting for data. Local.
  double wait_seconds() const { return wait_seconds_; }

 private:
  void run();

  Producer produce_;
  int depth_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  bool finished_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::int64_t next_inline_ = 0;
  double wait_seconds_ = 0;
  std::thread thread_;
};

}  // namespace hpctrain::data
