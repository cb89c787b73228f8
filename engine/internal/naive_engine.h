// NaiveEngine: runs each op at push, on the pushing thread, and waits for it to complete. The
// reference the threaded engine is tested against, and the engine to debug with
// (WEFT_ENGINE=naive): a failing op's stack is the pusher's.
#pragma once

#include <mutex>

#include "core/mutex.h"
#include "engine/device_backend.h"
#include "engine/engine.h"
#include "engine/internal/failure_log.h"
#include "engine/internal/profiler.h"
#include "engine/internal/var.h"

namespace weft::engine {

class NaiveEngine final : public Engine {
 public:
  explicit NaiveEngine(const EngineOptions& options);
  ~NaiveEngine() override;

  VarHandle NewVariable() override;
  void DeleteVariable(SyncFn deleter, Device device, VarHandle var) override;
  void WaitForVar(VarHandle var) override;
  void WaitForAll() override;
  void Shutdown() override;
  void StartProfiling(const std::string& path) override { profiler_.Start(path); }
  void StopProfiling() override;
  bool profiling() const override { return profiler_.running(); }
  EngineKind kind() const override { return EngineKind::kNaive; }

 protected:
  void Push(SyncFn sync, AsyncFn async, const PushArgs& args) override;

 private:
  class NaiveVar;
  // Runs the op now; returns what it raised.
  std::exception_ptr Run(const SyncFn& sync, const AsyncFn& async, const PushArgs& args)
      WEFT_REQUIRES(mu_);
  NaiveVar* Checked(VarHandle v, const char* name) const;
  // The stream GPU ops on `device` run on (made on first use); synchronized after each op.
  GpuStream* StreamOf(int device) WEFT_REQUIRES(mu_);
  // The GPU streams, named for the profiler's device tracks. With mu_ held.
  std::vector<NamedStream> NamedStreams() const WEFT_REQUIRES(mu_);

  Profiler profiler_;
  FailureLog failures_;
  VarRegistry vars_;
  // Serializes ops pushed from several threads; recursive so an op may push another op.
  RecursiveMutex mu_;
  bool shut_down_ WEFT_GUARDED_BY(mu_) = false;
  DeviceBackend* const gpu_ = GetDeviceBackend(DeviceType::kGpu);  // null on a CPU-only build
  std::vector<GpuStream*> gpu_streams_ WEFT_GUARDED_BY(mu_);       // by device id
};

}  // namespace weft::engine
