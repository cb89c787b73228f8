// Pooled CUDA events for op completion. An event is handed out with one reference; vars and
// waiters that keep it take more; it goes back to its device's free list when the last one is
// released, so an event is never re-recorded while anything may still wait on it. Events are
// never destroyed (the pool lives until the process ends, and no CUDA call runs from a static
// destructor). Events are recorded through the stream object (engine/gpu/gpu_stream.h), so an
// event follows the kernels batched on its stream before it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <vector>

#include "core/spin_lock.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

struct PooledEvent {
  cudaEvent_t event = nullptr;
  int device = 0;
  std::atomic<int> refs{0};
};

class EventPool {
 public:
  static EventPool& Get();
  // An event of `stream`'s device with one reference, recorded on `stream`. Any thread.
  PooledEvent* Record(engine::GpuStream& stream);
  // An event of `device` with one reference, recorded after all work queued so far on the
  // device's blocking streams (engine::GpuStream::RecordAfterAll). Any thread.
  PooledEvent* RecordAfterAll(int device);
  // An event of `device` with one reference, recorded on `stream`, a stream outside the engine's
  // (a communicator's own): no launch batch to flush. Any thread.
  PooledEvent* RecordOn(int device, cudaStream_t stream);
  static void AddRef(PooledEvent* e) { e->refs.fetch_add(1, std::memory_order_relaxed); }
  void Release(PooledEvent* e);

 private:
  static constexpr int kMaxDevices = 16;
  PooledEvent* Acquire(int device);
  // Records a fresh event of `device` with `record`; on failure gives it back and throws.
  template <typename RecordFn>
  PooledEvent* RecordWith(int device, RecordFn record);
  SpinLock mu_;
  std::vector<PooledEvent*> free_[kMaxDevices];  // guarded by mu_
};

}  // namespace weft::gpu
