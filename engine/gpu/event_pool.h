// Pooled CUDA events for op completion. An event is handed out with one reference; vars and
// waiters that keep it take more; it goes back to its device's free list when the last one is
// released, so an event is never re-recorded while anything may still wait on it. Events are
// never destroyed (the pool lives until the process ends, and no CUDA call runs from a static
// destructor).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "core/spin_lock.h"

namespace weft::gpu {

struct PooledEvent {
  cudaEvent_t event = nullptr;
  cudaStream_t stream = nullptr;  // where it was last recorded
  int device = 0;
  std::atomic<int> refs{0};
};

class EventPool {
 public:
  static EventPool& Get();
  // An event of `device` with one reference, recorded on `stream`.
  PooledEvent* Record(int device, cudaStream_t stream);
  static void AddRef(PooledEvent* e) { e->refs.fetch_add(1, std::memory_order_relaxed); }
  void Release(PooledEvent* e);

 private:
  static constexpr int kMaxDevices = 16;
  PooledEvent* Acquire(int device);
  SpinLock mu_;
  std::vector<PooledEvent*> free_[kMaxDevices];  // guarded by mu_
};

}  // namespace weft::gpu
