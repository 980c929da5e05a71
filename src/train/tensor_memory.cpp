#include "tensor_memory.hpp"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "hpctrain/compat/torch_compat.hpp"

namespace hpctrain::train {
namespace {

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};

void add(std::int64_t bytes) {
  const std::int64_t now = g_live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Each counted allocation carries its size in a header of kHeader bytes in front of the data
// (a multiple of the default allocator's 64-byte alignment, so the data keeps it). The context
// is the data pointer itself, as LibTorch's raw interface (raw_allocate / raw_deleter) requires.
constexpr std::size_t kHeader = 64;
c10::DeleterFnPtr g_inner_delete = nullptr;

void delete_counted(void* data) {
  if (!data) return;
  char* block = static_cast<char*>(data) - kHeader;
  std::int64_t bytes = 0;
  std::memcpy(&bytes, block, sizeof bytes);
  g_live.fetch_sub(bytes, std::memory_order_relaxed);
  g_inner_delete(block);
}

// Forwards to the allocator LibTorch had (the default CPU allocator), kHeader bytes more.
class CountingAllocator final : public compat::CpuAllocatorBase {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate_block(size_t n) const override {
    if (n == 0) return inner_->allocate(0);
    c10::DataPtr block = inner_->allocate(n + kHeader);
    const c10::Device device = block.device();
    char* raw = static_cast<char*>(block.release_context());  // ours now, freed by delete_counted
    const auto bytes = static_cast<std::int64_t>(n);
    std::memcpy(raw, &bytes, sizeof bytes);
    add(bytes);
    return {raw + kHeader, raw + kHeader, &delete_counted, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void install_tensor_memory_counter() {
  static std::once_flag once;
  std::call_once(once, [] {
    c10::Allocator* inner = c10::GetCPUAllocator();
    // The wrapped allocator must free a block from its pointer alone (the default one does).
    g_inner_delete = inner->raw_deleter();
    if (!g_inner_delete) return;
    {
      c10::DataPtr probe = inner->allocate(kHeader);
      if (probe.get() != probe.get_context()) return;  // its context is not the data: not ours
    }
    // Lives as long as the process: tensors freed during exit still call into it.
    static auto* counting = new CountingAllocator(inner);
    // Priority above the default CPU allocator's (0), so LibTorch keeps ours.
    c10::SetCPUAllocator(counting, /*priority=*/1);
  });
}

std::int64_t live_tensor_bytes() {
  return g_live.load(std::memory_order_relaxed);
}

std::int64_t peak_tensor_bytes() {
  return g_peak.load(std::memory_order_relaxed);
}

void reset_peak_tensor_bytes() {
  g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace hpctrain::train
