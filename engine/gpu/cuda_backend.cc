// The engine's GPU backend (engine/device_backend.h), registered at start-up by the CUDA build.
//
// Per var it keeps the device work an access must wait for: the completion of the last writing
// op, and the latest completion of each stream that read the var since (a later one on a stream
// implies the earlier ones). A completion is a point on a worker's stream after an op's work. Its
// event is recorded lazily, the first time a consumer needs it: a consumer on the same stream
// needs none (the stream orders it), so a chain of ops on one stream records no events. Recorded
// later, the event also covers work queued after the op, which only adds waiting, never removes
// it; and it can form no cycle, since an event covers only work already queued. A device op on
// another stream waits with cudaStreamWaitEvent (once per stream and completion); a CPU op
// synchronizes on the event.
//
// What each field relies on: a var's `writer` changes only while an op holds the var for writing
// (no reader or other writer runs), so reads of it need no lock; `readers` is changed by
// concurrent reading ops and has a spin lock. A point's `waited_by` bit for a stream is tested
// and then set without a lock (WaitOn): only that stream's owner makes it wait, one thread at a
// time (engine/gpu/gpu_stream.h), so the test and the set cannot interleave with another for the
// same bit. Each stream's work is queued only by its owner, except event records, which any
// consumer may make (stream_point.h).
//
// Errors kernels find in their inputs (engine/gpu/device_error.h) ride on points: a device op's
// point carries its own checks and those of the last writers of its vars (CarryErrors). A host
// wait reads them once it is over. As a CPU error slot is reported by one WaitForVar, a var's
// `errors_taken` names the writer whose errors a WaitForVar took: later WaitForVars on the var
// do not raise them. (Ops that access the var later still carry them on: unlike a CPU error slot,
// which that WaitForVar clears; an op granted just before the wait may run after it, so clearing
// could not tell the two apart.) It is set by concurrent WaitForVar ops (exchange: one takes
// them) and reset by the next writer (which holds the var alone).
//
// Environment: WEFT_GPU_COMPUTE_WORKERS (default 2), WEFT_GPU_COPY_WORKERS (default 1, each way).
#include <cuda_runtime.h>

#include <cstdlib>
#include <exception>
#include <mutex>
#include <vector>

#include "core/env.h"
#include "core/gpu/cuda_check.h"
#include "core/small_vector.h"
#include "core/spin_lock.h"
#include "engine/device_backend.h"
#include "engine/gpu/device_error.h"
#include "engine/gpu/event_pool.h"
#include "engine/gpu/gpu_stream.h"
#include "engine/gpu/recorded_work.h"
#include "engine/gpu/stream_point.h"

namespace weft::gpu {

namespace {

using engine::Completion;
using engine::GpuStream;
using engine::RunContext;
using engine::StreamKind;
using engine::VarSyncSlot;

struct CudaVarState final : engine::VarDeviceState {
  SpinLock mu;                           // guards readers (concurrent reading ops add to it)
  StreamPoint* writer = nullptr;         // changed only by an op holding the var for writing
  SmallVector<StreamPoint*, 4> readers;  // one per stream
  std::atomic<StreamPoint*> errors_taken{nullptr};  // null, or `writer`: see the file comment
};

StreamPoint* AsPoint(Completion c) { return static_cast<StreamPoint*>(c); }

// The last writer of the var, if it carries errors.
StreamPoint* WriterWithErrors(CudaVarState* s) {
  return s == nullptr || s->writer == nullptr || s->writer->errors.empty() ? nullptr : s->writer;
}

CudaVarState* StateOf(VarSyncSlot& slot) {
  return static_cast<CudaVarState*>(slot.state.load(std::memory_order_acquire));
}

CudaVarState& MakeState(VarSyncSlot& slot) {
  if (CudaVarState* s = StateOf(slot)) return *s;
  auto* fresh = new CudaVarState;
  engine::VarDeviceState* expected = nullptr;
  if (slot.state.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) return *fresh;
  delete fresh;  // a concurrent reader made it first
  return *static_cast<CudaVarState*>(expected);
}

// Makes `ctx`'s work wait for `p`: on its stream (nothing on p's own stream, or on a stream that
// already waited for it), or on the CPU. The test of the stream's bit and its setting are not one
// atomic step: see the file comment for why that is safe.
void WaitOn(const RunContext& ctx, StreamPoint* p) {
  GpuStream* const stream = ctx.stream;
  if (stream == nullptr) {
    WEFT_CUDA_CHECK(cudaEventSynchronize(EventOf(p)->event));
    return;
  }
  if (p->stream == stream) return;
  const int id = stream->id();
  const uint64_t bit = id < 0 ? 0 : uint64_t{1} << id;
  if (bit != 0 && (p->waited_by.load(std::memory_order_acquire) & bit)) return;
  stream->Wait(EventOf(p)->event);
  p->waited_by.fetch_or(bit, std::memory_order_acq_rel);
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

  // The stream belongs to the worker it is made for (engine/gpu/gpu_stream.h says who else may
  // touch it). Blocking: work recorded on cudaStreamLegacy waits for it, which a free without a
  // stream relies on (storage/gpu/gpu_storage.cc).
  GpuStream* CreateStream(int device, StreamKind kind) override {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    WEFT_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    return new GpuStream(device, {.blocking = true,
                                  .priority = kind == StreamKind::kPrioritized ? greatest : least});
  }

  // After the engine has drained: no op and no consumer can use the stream any more.
  void DestroyStream(int device, GpuStream* stream) override {
    DeviceGuard guard(device);
    delete stream;  // launches what is batched and waits for the stream first
  }

  void BindThread(int device) override { WEFT_CUDA_CHECK(cudaSetDevice(device)); }

  int StreamCount(StreamKind kind) const override {
    switch (kind) {
      case StreamKind::kCompute:
        return compute_workers_;
      case StreamKind::kCopyToDevice:
      case StreamKind::kCopyFromDevice:
        return copy_workers_;
      case StreamKind::kPrioritized:
        return 1;
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
    for (StreamPoint* r : s->readers) WaitOn(ctx, r);
  }

  Completion RecordCompletion(const RunContext& ctx) override {
    return AcquirePoint(ctx.stream, ctx.stream->TakeErrors());
  }

  // The op holds `var`, so its writer is stable; `done` is not shared yet.
  void CarryErrors(Completion done, VarSyncSlot& var) override {
    if (StreamPoint* w = WriterWithErrors(StateOf(var))) AsPoint(done)->errors.Inherit(w->errors);
  }

  // The CPU op holds `var` and has waited for its writer: the writer's checks are done.
  std::exception_ptr TakeWriterError(VarSyncSlot& var) override {
    StreamPoint* w = WriterWithErrors(StateOf(var));
    return w ? w->errors.TakeFailure() : nullptr;
  }

  // Read by the op that holds `var` (its writer is stable).
  bool CarriesErrors(VarSyncSlot& var) override {
    return WriterWithErrors(StateOf(var)) != nullptr;
  }

  void AddReader(VarSyncSlot& var, Completion done) override {
    CudaVarState& s = MakeState(var);
    StreamPoint* p = AsPoint(done);
    AddRef(p);
    StreamPoint* replaced = nullptr;
    {
      SpinLockHolder lock(&s.mu);
      for (StreamPoint*& r : s.readers) {
        if (r->stream == p->stream) {
          replaced = r;
          r = p;
          break;
        }
      }
      if (replaced == nullptr) s.readers.push_back(p);
    }
    if (replaced != nullptr) ReleasePoint(replaced);
  }

  void SetWriter(VarSyncSlot& var, Completion done) override {
    CudaVarState& s = MakeState(var);
    ClearLocked(s);
    if (done != nullptr) {
      AddRef(AsPoint(done));
      s.writer = AsPoint(done);
    }
  }

  void Release(Completion done) override { ReleasePoint(AsPoint(done)); }

  // Records the writer's event now (on the pushing thread's behalf), so that the wait after needs
  // only the event. The wait raises the writer's errors unless an earlier WaitForVar on the var
  // took them: then it gets a point of its own with the writer's event and no errors.
  Completion CaptureWriter(VarSyncSlot& var) override {
    CudaVarState* s = StateOf(var);
    if (s == nullptr || s->writer == nullptr) return nullptr;
    PooledEvent* event = EventOf(s->writer);
    const bool raises = !s->writer->errors.empty() &&
                        s->errors_taken.exchange(s->writer, std::memory_order_acq_rel) != s->writer;
    if (raises || s->writer->errors.empty()) {
      AddRef(s->writer);
      return s->writer;
    }
    StreamPoint* own = AcquirePoint(s->writer->stream);
    EventPool::AddRef(event);
    own->event.store(event, std::memory_order_release);
    return own;
  }

  // Recorded by CaptureWriter (or, for the naive engine's op, now, by the stream's owner).
  void WaitAndRelease(Completion done) override {
    StreamPoint* p = AsPoint(done);
    cudaError_t error = cudaSuccess;
    std::exception_ptr found;
    try {
      error = cudaEventSynchronize(EventOf(p)->event);
      if (error == cudaSuccess) found = p->errors.TakeFailure();
    } catch (...) {
      found = std::current_exception();
    }
    ReleasePoint(p);
    if (error != cudaSuccess)
      ThrowCudaError(error, "cudaEventSynchronize(event)", __FILE__, __LINE__);
    if (found) std::rethrow_exception(found);
  }

  void DestroyState(VarSyncSlot& var) override {
    auto* s = static_cast<CudaVarState*>(var.state.exchange(nullptr, std::memory_order_acq_rel));
    if (s == nullptr) return;
    ClearLocked(*s);
    delete s;
  }

  void Synchronize(GpuStream* stream) override { stream->Synchronize(); }

  std::exception_ptr RetireErrors() override { return RetireDeviceErrors(); }

  void StreamIdle(GpuStream* stream) override { stream->FlushWhenIdle(); }

  std::unique_ptr<engine::RecordedWork> Record(const RunContext& ctx, size_t values,
                                               const engine::RecordFn& record) override {
    return CudaRecordedWork::Record(ctx, values, record);
  }

 private:
  // With the var held for writing (no reader can run).
  static void ClearLocked(CudaVarState& s) {
    if (s.writer) ReleasePoint(s.writer);
    s.writer = nullptr;
    s.errors_taken.store(nullptr, std::memory_order_relaxed);
    for (StreamPoint* r : s.readers) ReleasePoint(r);
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
