#include "engine/gpu/stream_point.h"

#include <mutex>
#include <utility>
#include <vector>

#include "core/no_destructor.h"
#include "core/spin_lock.h"

namespace weft::gpu {

namespace {

// Pooled StreamPoints: one per GPU op, so no allocation per op.
class PointPool {
 public:
  StreamPoint* Acquire(engine::GpuStream* stream, DeviceErrors errors) {
    StreamPoint* p = nullptr;
    {
      SpinLockHolder lock(&mu_);
      if (!free_.empty()) p = free_.back(), free_.pop_back();
    }
    if (p == nullptr) p = new StreamPoint;
    p->stream = stream;
    p->event.store(nullptr, std::memory_order_relaxed);
    p->waited_by.store(0, std::memory_order_relaxed);
    p->errors = std::move(errors);
    p->refs.store(1, std::memory_order_release);
    return p;
  }
  void Release(StreamPoint* p) {
    if (p->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    if (PooledEvent* e = p->event.load(std::memory_order_acquire)) EventPool::Get().Release(e);
    p->errors.Clear();
    SpinLockHolder lock(&mu_);
    free_.push_back(p);
  }

 private:
  SpinLock mu_;
  std::vector<StreamPoint*> free_ WEFT_GUARDED_BY(mu_);  // never freed (process lifetime)
};

PointPool& Points() {
  static NoDestructor<PointPool> pool;
  return *pool;
}

}  // namespace

StreamPoint* AcquirePoint(engine::GpuStream* stream, DeviceErrors errors) {
  return Points().Acquire(stream, std::move(errors));
}

void ReleasePoint(StreamPoint* p) { Points().Release(p); }

// The point's event, recorded now on its stream if no consumer has needed it before.
PooledEvent* EventOf(StreamPoint* p) {
  if (PooledEvent* e = p->event.load(std::memory_order_acquire)) return e;
  PooledEvent* fresh = EventPool::Get().Record(*p->stream);
  PooledEvent* expected = nullptr;
  if (p->event.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return fresh;
  EventPool::Get().Release(fresh);  // another consumer recorded it first
  return expected;
}

}  // namespace weft::gpu
