// How a device backend plugs its streams and events into the engine. The engine core knows no
// CUDA: the CUDA build's engine/gpu registers a DeviceBackend for DeviceType::kGpu at start-up,
// and the engine then gives each GPU worker a stream (a GpuStream, opaque here, which the worker
// owns: only it queues work there) and calls the backend around every op to order device work
// through the op's vars:
//
//   before an op runs:  for each var it reads, WaitForWriter; for each var it writes, WaitForAll.
//                       On a device op (ctx.stream set) these make the stream wait (no CPU wait);
//                       on a CPU op they block until the device work is done.
//   after it returned:  a device op records one completion on its stream (RecordCompletion) and
//                       attaches it to its vars (AddReader / SetWriter); a CPU op that wrote a
//                       var clears the var's device work (SetWriter with null), since it waited
//                       for all of it first.
//
// An op's device work is therefore complete, for every later consumer, when the event recorded
// after it on its worker's stream is: the engine never synchronizes a stream per op.
//
// Errors that kernels find in their inputs (a bad label) are known only once the device work is
// done, after the op has finished as far as the engine is concerned. They belong to the op's
// completion, which passes them on to the completions of the device ops that depend on it
// (CarryErrors); host waits raise them: WaitAndRelease (WaitForVar), a CPU op after its waits
// (TakeWriterError: the op fails with it, as with an input's error), WaitForAll (RetireErrors).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>

#include "core/device.h"
#include "engine/engine.h"

namespace weft::engine {

enum class StreamKind : uint8_t { kCompute, kCopyToDevice, kCopyFromDevice, kPrioritized };

// Pending device work on one var, owned by the backend (the engine only stores the pointer).
class VarDeviceState {
 public:
  virtual ~VarDeviceState() = default;
};

// One slot per var. `state` is null until a device op touches the var.
struct VarSyncSlot {
  std::atomic<VarDeviceState*> state{nullptr};
};

// A recorded completion (an event), opaque to the engine: the backend derives its own record from
// CompletionRecord (the CUDA backend's StreamPoint) and reference counts it. The engine only passes
// the handle back to the backend that made it; null means no device work.
class CompletionRecord {
 protected:
  CompletionRecord() = default;
  ~CompletionRecord() = default;  // a record is freed as the backend's own type, never as this
};
using Completion = CompletionRecord*;

// Device work recorded once and replayed as one launch (a CUDA graph): a bound training step
// whose ops, attributes and memory never change (executor/internal/step_capture.h). It reads
// `values` 64-bit slots in device memory (the per-step shifts of random keys), which a replay
// sets first.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  // The device addresses of the value slots (uint64_t each), for the recorded work to read.
  virtual const uint64_t* values() const = 0;
  // Slot k's value for this replay and the later ones (0 after recording). Host only: nothing is
  // queued, and replays already queued keep theirs.
  virtual void SetValue(size_t k, uint64_t value) = 0;
  // Queues the recorded work on the op's stream (ctx.stream), after what is queued there.
  virtual void Replay(const RunContext& ctx) = 0;
};

// Records what `record` queues on the stream of the RunContext it is called with: a stream of the
// recording's own, on which nothing runs (the work runs at Replay). See DeviceBackend::Record.
using RecordFn = std::function<void(const RunContext& recording, const uint64_t* values)>;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceType type() const = 0;
  // Throws weft::Error when `device` cannot be used (absent, or no driver).
  virtual void CheckDevice(int device) = 0;
  // Streams for one engine's workers. Created on the pushing thread (errors reach the caller);
  // destroyed after the engine has drained (no op runs and none can be pushed).
  virtual GpuStream* CreateStream(int device, StreamKind kind) = 0;
  virtual void DestroyStream(int device, GpuStream* stream) = 0;
  // On a worker thread before its first op (makes the device current).
  virtual void BindThread(int device) = 0;
  virtual int StreamCount(StreamKind kind) const = 0;  // workers per device of each kind

  // Ordering, with the op's access to the var granted (see the file comment).
  virtual void WaitForWriter(const RunContext& ctx, VarSyncSlot& var) = 0;
  virtual void WaitForAll(const RunContext& ctx, VarSyncSlot& var) = 0;
  virtual Completion RecordCompletion(const RunContext& ctx) = 0;
  // Before `done` (the op's, just recorded) is attached to the op's vars: it carries on the
  // errors the device work that last wrote `var` may have found.
  virtual void CarryErrors(Completion done, VarSyncSlot& var) {}
  // For a CPU op, after its waits: the error of the device work that last wrote `var`, which the
  // op then raises as its own (null if none).
  virtual std::exception_ptr TakeWriterError(VarSyncSlot& var) { return nullptr; }
  // Whether the device work that last wrote `var` carries errors (CarryErrors would pass some on).
  virtual bool CarriesErrors(VarSyncSlot& var) { return false; }
  virtual void AddReader(VarSyncSlot& var, Completion done) = 0;
  virtual void SetWriter(VarSyncSlot& var, Completion done) = 0;  // done may be null (CPU write)
  virtual void Release(Completion done) = 0;
  // A reference to the device work that last wrote `var` (null if none), for WaitForVar: taken
  // while the var is held, waited for (and released) after. WaitAndRelease throws a CUDA error,
  // or the error the work found in its inputs: raised by one WaitForVar on the var, as a CPU
  // error slot is reported once.
  virtual Completion CaptureWriter(VarSyncSlot& var) = 0;
  virtual void WaitAndRelease(Completion done) = 0;
  // Frees a var's state (the var is being deleted; nothing can wait on it any more).
  virtual void DestroyState(VarSyncSlot& var) = 0;
  // Blocks until the work queued on `stream` is done (WaitForAll).
  virtual void Synchronize(GpuStream* stream) = 0;
  // For WaitForAll, after every stream is synchronized: the first error kernels found that no
  // wait has raised (null if none); retires them all.
  virtual std::exception_ptr RetireErrors() { return nullptr; }
  // The stream's worker has no more work for now (it may push out work it has been holding).
  virtual void StreamIdle(GpuStream* stream) {}
  // On the worker running op `ctx`: records what `record` queues, for replays (RecordedWork),
  // with `values` value slots. Throws weft::Error saying why when the work cannot be recorded (a
  // host wait or a device check inside it, or `record` throwing); nothing has run then, and
  // nothing stays queued.
  virtual std::unique_ptr<RecordedWork> Record(const RunContext& ctx, size_t values,
                                               const RecordFn& record);
};

// Called once by a backend at static initialization.
void RegisterDeviceBackend(std::unique_ptr<DeviceBackend> backend);
// The backend for `type`, or null (the CPU-only build has none).
DeviceBackend* GetDeviceBackend(DeviceType type);

}  // namespace weft::engine
