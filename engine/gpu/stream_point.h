// A StreamPoint: the point on a worker's stream right after an op's work, which is when the op
// is complete for every later consumer (engine/gpu/cuda_backend.cc). Its CUDA event is recorded
// lazily, the first time a consumer on another stream or the CPU needs it (EventOf): a later
// record covers the op's work and possibly more, never less. Points are pooled and reference
// counted; their events go back to the EventPool with them.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "engine/gpu/event_pool.h"

namespace weft::gpu {

struct StreamPoint {
  cudaStream_t stream = nullptr;
  int device = 0;
  std::atomic<int> refs{0};
  std::atomic<PooledEvent*> event{nullptr};
  std::atomic<uint64_t> waited_by{0};  // streams (by StreamId) already made to wait on it
};

// A point of `stream` (on `device`) with one reference.
StreamPoint* AcquirePoint(cudaStream_t stream, int device);
inline void AddRef(StreamPoint* p) { p->refs.fetch_add(1, std::memory_order_relaxed); }
void ReleasePoint(StreamPoint* p);

// The point's event, recorded now on its stream if no consumer has needed it before.
PooledEvent* EventOf(StreamPoint* p);

// A small id per stream (bit positions of StreamPoint::waited_by); -1 past 64 streams.
int StreamId(cudaStream_t stream);

}  // namespace weft::gpu
