// A StreamPoint: the point on a worker's stream right after an op's work, which is when the op
// is complete for every later consumer (engine/gpu/cuda_backend.cc), with the errors that work
// may have found in its inputs (engine/gpu/device_error.h), raised by the host waits on it. Its
// CUDA event is recorded lazily, the first time a consumer on another stream or the CPU needs it
// (EventOf): a later record covers the op's work and possibly more, never less. Points are pooled
// and reference counted; their events go back to the EventPool with them.
//
// A point names its stream without owning it: the engine destroys a stream only after draining,
// when no op can run and no WaitForVar can be pushed, so no consumer records a point's event on a
// stream that is gone. (Vars may keep points after that; they are only released.)
#pragma once

#include <atomic>
#include <cstdint>

#include "engine/device_backend.h"
#include "engine/gpu/device_error.h"
#include "engine/gpu/event_pool.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

// The CUDA backend's engine::Completion.
struct StreamPoint final : engine::CompletionRecord {
  engine::GpuStream* stream = nullptr;
  std::atomic<int> refs{0};
  std::atomic<PooledEvent*> event{
      nullptr};  // recorded once, by whichever consumer needs it first (CAS)
  // The streams (bit GpuStream::id()) already made to wait on this point. A stream's bit is read
  // and then set without a lock (cuda_backend.cc, WaitOn): safe because only the stream's owner
  // (one thread at a time) makes it wait, so no two threads test and set the same bit; bits of
  // other streams are set with fetch_or and do not interfere.
  std::atomic<uint64_t> waited_by{0};
  // The op's checks and those of the work before it that may have failed. Filled before the
  // point is shared (its op's completion), read-only after, cleared when it goes back.
  DeviceErrors errors;
};

// A point of `stream` with one reference, carrying `errors`.
StreamPoint* AcquirePoint(engine::GpuStream* stream, DeviceErrors errors = {});
inline void AddRef(StreamPoint* p) { p->refs.fetch_add(1, std::memory_order_relaxed); }
void ReleasePoint(StreamPoint* p);

// The point's event, recorded now on its stream if no consumer has needed it before.
PooledEvent* EventOf(StreamPoint* p);

}  // namespace weft::gpu
