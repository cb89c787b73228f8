#include "engine/gpu/event_pool.h"

#include <mutex>

#include "core/gpu/cuda_check.h"
#include "core/no_destructor.h"

namespace weft::gpu {

EventPool& EventPool::Get() {
  static NoDestructor<EventPool> pool;  // see the header
  return *pool;
}

PooledEvent* EventPool::Acquire(int device) {
  WEFT_CHECK(device >= 0 && device < kMaxDevices)
      << "expected a GPU id below " << kMaxDevices << ", found " << device;
  {
    SpinLockHolder lock(&mu_);
    if (!free_[device].empty()) {
      PooledEvent* e = free_[device].back();
      free_[device].pop_back();
      return e;
    }
  }
  auto* e = new PooledEvent;
  e->device = device;
  DeviceGuard guard(device);
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming));
  return e;
}

template <typename RecordFn>
PooledEvent* EventPool::RecordWith(int device, RecordFn record) {
  PooledEvent* e = Acquire(device);
  try {
    record(e->event);
  } catch (...) {
    Release(e);  // refs is 0: straight back to the free list
    throw;
  }
  e->refs.store(1, std::memory_order_relaxed);
  return e;
}

PooledEvent* EventPool::Record(engine::GpuStream& stream) {
  return RecordWith(stream.device(), [&](cudaEvent_t event) { stream.Record(event); });
}

PooledEvent* EventPool::RecordAfterAll(int device) {
  DeviceGuard guard(device);  // the legacy stream of the event's device
  return RecordWith(device, [](cudaEvent_t event) { engine::GpuStream::RecordAfterAll(event); });
}

PooledEvent* EventPool::RecordOn(int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  return RecordWith(
      device, [stream](cudaEvent_t event) { WEFT_CUDA_CHECK(cudaEventRecord(event, stream)); });
}

void EventPool::Release(PooledEvent* e) {
  if (e->refs.load(std::memory_order_relaxed) > 0 &&
      e->refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
    return;
  SpinLockHolder lock(&mu_);
  free_[e->device].push_back(e);
}

}  // namespace weft::gpu
