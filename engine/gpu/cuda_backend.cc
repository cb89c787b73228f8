// The engine's GPU backend (engine/device_backend.h), registered at start-up by the CUDA build.
//
// Per var it keeps the device work an access must wait for: the event recorded after the last
// writing op, and the latest event of each stream that read the var since (a later event on a
// stream implies the earlier ones). A device op waits with cudaStreamWaitEvent (skipped for work
// on its own stream); a CPU op synchronizes on the event.
//
// Environment: WEFT_GPU_COMPUTE_WORKERS (default 2), WEFT_GPU_COPY_WORKERS (default 1, each way).
#include <cuda_runtime.h>

#include <cstdlib>
#include <mutex>

#include "core/env.h"
#include "core/gpu/cuda_check.h"
#include "core/small_vector.h"
#include "core/spin_lock.h"
#include "engine/device_backend.h"
#include "engine/gpu/event_pool.h"

namespace weft::gpu {

namespace {

using engine::Completion;
using engine::RunContext;
using engine::StreamKind;
using engine::VarSyncSlot;

struct CudaVarState final : engine::VarDeviceState {
  SpinLock mu;                            // guards readers (concurrent reading ops add to it)
  PooledEvent* writer = nullptr;          // changed only by an op holding the var for writing
  SmallVector<PooledEvent*, 4> readers;  // one per stream
};

PooledEvent* AsEvent(Completion c) { return static_cast<PooledEvent*>(c); }

CudaVarState* StateOf(VarSyncSlot& slot) { return static_cast<CudaVarState*>(slot.state.load(std::memory_order_acquire)); }

CudaVarState& MakeState(VarSyncSlot& slot) {
  if (CudaVarState* s = StateOf(slot)) return *s;
  auto* fresh = new CudaVarState;
  engine::VarDeviceState* expected = nullptr;
  if (slot.state.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // a concurrent reader made it first
  return *static_cast<CudaVarState*>(expected);
}

// Makes `ctx`'s work wait for `e`: on its stream, or on the CPU.
void WaitOn(const RunContext& ctx, PooledEvent* e) {
  if (ctx.stream == nullptr) {
    WEFT_CUDA_CHECK(cudaEventSynchronize(e->event));
  } else if (e->stream != ctx.stream) {
    WEFT_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(ctx.stream), e->event, 0));
  }
}

class CudaBackend final : public engine::DeviceBackend {
 public:
  CudaBackend()
      : compute_workers_(GetEnvInt("WEFT_GPU_COMPUTE_WORKERS", 2, 1, 64)),
        copy_workers_(GetEnvInt("WEFT_GPU_COPY_WORKERS", 1, 1, 16)) {}

  DeviceType type() const override { return DeviceType::kGpu; }

  void CheckDevice(int device) override {
    CheckGpu(device);
    // The CUDA runtime is initialized now: an exit hook registered after it runs before the
    // runtime's own teardown, so the engine drains and frees its streams while CUDA still works.
    static std::once_flag once;
    std::call_once(once, [] { std::atexit([] { engine::Engine::Get()->Shutdown(); }); });
  }

  void* CreateStream(int device, StreamKind kind) override {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    WEFT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // Blocking streams (the default flag): work recorded on cudaStreamLegacy waits for them, which
    // is what joining a library's auxiliary streams relies on (core/gpu/stream_join.h).
    cudaStream_t stream = nullptr;
    WEFT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamDefault,
                                                 kind == StreamKind::kPrioritized ? greatest : least));
    return stream;
  }

  void DestroyStream(int device, void* stream) override {
    DeviceGuard guard(device);
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }

  void BindThread(int device) override { WEFT_CUDA_CHECK(cudaSetDevice(device)); }

  int StreamCount(StreamKind kind) const override {
    switch (kind) {
      case StreamKind::kCompute: return compute_workers_;
      case StreamKind::kCopyToDevice:
      case StreamKind::kCopyFromDevice: return copy_workers_;
      case StreamKind::kPrioritized: return 1;
    }
    return 1;
  }

  // The op reads the var: no write can run, so `writer` is stable.
  void WaitForWriter(const RunContext& ctx, VarSyncSlot& var) override {
    if (CudaVarState* s = StateOf(var); s && s->writer) WaitOn(ctx, s->writer);
  }

  // The op writes the var: it holds it alone.
  void WaitForAll(const RunContext& ctx, VarSyncSlot& var) override {
    CudaVarState* s = StateOf(var);
    if (s == nullptr) return;
    if (s->writer) WaitOn(ctx, s->writer);
    for (PooledEvent* r : s->readers) WaitOn(ctx, r);
  }

  Completion RecordCompletion(const RunContext& ctx) override {
    return EventPool::Get().Record(ctx.device.id, static_cast<cudaStream_t>(ctx.stream));
  }

  void AddReader(VarSyncSlot& var, Completion done) override {
    CudaVarState& s = MakeState(var);
    PooledEvent* e = AsEvent(done);
    EventPool::AddRef(e);
    PooledEvent* replaced = nullptr;
    {
      std::lock_guard<SpinLock> lock(s.mu);
      for (PooledEvent*& r : s.readers) {
        if (r->stream == e->stream) {
          replaced = r;
          r = e;
          break;
        }
      }
      if (replaced == nullptr) s.readers.push_back(e);
    }
    if (replaced != nullptr) EventPool::Get().Release(replaced);
  }

  void SetWriter(VarSyncSlot& var, Completion done) override {
    CudaVarState& s = MakeState(var);
    ClearLocked(s);
    if (done != nullptr) {
      EventPool::AddRef(AsEvent(done));
      s.writer = AsEvent(done);
    }
  }

  void Release(Completion done) override { EventPool::Get().Release(AsEvent(done)); }

  Completion CaptureWriter(VarSyncSlot& var) override {
    CudaVarState* s = StateOf(var);
    if (s == nullptr || s->writer == nullptr) return nullptr;
    EventPool::AddRef(s->writer);
    return s->writer;
  }

  void WaitAndRelease(Completion done) override {
    PooledEvent* e = AsEvent(done);
    const cudaError_t error = cudaEventSynchronize(e->event);
    EventPool::Get().Release(e);
    if (error != cudaSuccess) ThrowCudaError(error, "cudaEventSynchronize(event)", __FILE__, __LINE__);
  }

  void DestroyState(VarSyncSlot& var) override {
    auto* s = static_cast<CudaVarState*>(var.state.exchange(nullptr, std::memory_order_acq_rel));
    if (s == nullptr) return;
    ClearLocked(*s);
    delete s;
  }

  void Synchronize(void* stream) override { WEFT_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream))); }

 private:
  // With the var held for writing (no reader can run).
  static void ClearLocked(CudaVarState& s) {
    if (s.writer) EventPool::Get().Release(s.writer);
    s.writer = nullptr;
    for (PooledEvent* r : s.readers) EventPool::Get().Release(r);
    s.readers.clear();
  }

  const int compute_workers_;
  const int copy_workers_;
};

[[maybe_unused]] const bool registered = [] {
  engine::RegisterDeviceBackend(std::make_unique<CudaBackend>());
  return true;
}();

}  // namespace

}  // namespace weft::gpu
