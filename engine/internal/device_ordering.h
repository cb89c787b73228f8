// Device ordering for the threaded engine: the policy that sends a ready GPU op to its device's
// workers (made on first use), and the device work around each op, through the DeviceBackend
// (device_backend.h): the cross-stream waits an op needs before it runs and the completion it
// records after. The dependency tracker (threaded_engine.cc) decides when an op may run; this
// decides where a GPU op runs and what its stream must wait for. On a CPU-only build there is no
// backend: enabled() is false and the engine calls none of the rest.
#pragma once

#include <array>
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "core/mutex.h"
#include "engine/device_backend.h"
#include "engine/internal/device_workers.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/worker_pool.h"
#include "engine/profiler_hooks.h"

namespace weft::engine {

class Profiler;

class DeviceOrdering {
 public:
  // `run` executes an op on a GPU worker; worker ids start at `first_worker_id`. No workers are
  // made once `accepting` (the engine's flag) is cleared. `profiler` may be null.
  DeviceOrdering(DeviceBackend* backend, int first_worker_id, WorkerPool::Runner run,
                 const std::atomic<bool>& accepting, Profiler* profiler);

  bool enabled() const { return backend_ != nullptr; }

  // The GPU's workers, made on first use (at push, so errors reach the pusher).
  DeviceWorkers* Workers(int device);
  // Sends a ready GPU op to its device's workers, which Workers made when it was pushed.
  void Submit(OprBlock* op) { workers_[op->device.id].load(std::memory_order_acquire)->Submit(op); }

  // With every var of the op granted: makes the op's stream wait for (or, for a CPU op, blocks
  // until) the device work it depends on. A CPU op then throws the error that work found in its
  // inputs (device_backend.h), unless it runs whatever its vars hold (no_skip).
  void Prepare(OprBlock* op, GpuStream* stream);
  // Before the op releases its vars: attaches the op's device work to them, with the errors of
  // the device work it depended on. Returns what failed.
  std::exception_ptr Complete(OprBlock* op);
  // For WaitForVar: the device work that last wrote `var`, taken while the var is held, then
  // waited for (and released) by the waiting thread.
  Completion CaptureWriter(VarSyncSlot& var) { return backend_->CaptureWriter(var); }
  void WaitAndRelease(Completion done) { backend_->WaitAndRelease(done); }
  // The var is deleted: nothing can wait on its device work any more.
  void DestroyState(VarSyncSlot& var) { backend_->DestroyState(var); }

  // Blocks until every stream's queued device work is done (WaitForAll).
  void Synchronize();
  // After Synchronize: the first error kernels found that no wait has raised; retires them all.
  std::exception_ptr RetireErrors() { return backend_->RetireErrors(); }
  // Every worker's stream, named after its worker (for the profiler's device tracks).
  std::vector<NamedStream> Streams();
  // Lets the workers drain and joins them, but keeps them: for a shutdown from inside an op,
  // whose thread may be one of theirs.
  void StopKeeping();
  // Lets the workers drain, joins them, waits for their streams and destroys them.
  void Stop();

 private:
  static constexpr int kMaxGpus = 16;
  // A CPU op's vars, after its waits: throws the first device error they hold.
  void RaiseDeviceError(const OprBlock& op);
  bool CarriesErrors(const OprBlock& op);  // any of its vars' writers carries device errors
  DeviceBackend* const backend_;           // null on a CPU-only build
  const WorkerPool::Runner run_;
  const std::atomic<bool>& accepting_;
  Profiler* const profiler_;
  std::array<std::atomic<DeviceWorkers*>, kMaxGpus> workers_{};  // published under mu_
  Mutex mu_;
  std::vector<std::unique_ptr<DeviceWorkers>> owned_ WEFT_GUARDED_BY(mu_);
  int next_worker_id_ WEFT_GUARDED_BY(mu_);
};

}  // namespace weft::engine
