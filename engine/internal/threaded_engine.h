// ThreadedEngine: the default engine, and its dependency tracker. Ops wait in per-var queues
// (ThreadedVar) until every var grants them, then run on a worker pool; completion releases the
// vars, which grants the next ops. A small CPU op (kCpuSmall) that every var grants at push runs
// right there on the pushing thread: it holds its vars exactly as on a worker, so ordering and
// error propagation are the same, and it costs no hand-off. Where a GPU op runs and how its device
// work is ordered is DeviceOrdering's (device_ordering.h). See engine.h for the contract.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/internal/device_ordering.h"
#include "engine/internal/failure_log.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/profiler.h"
#include "engine/internal/threaded_var.h"
#include "engine/internal/var.h"
#include "engine/internal/worker_pool.h"

namespace weft::engine {

class ThreadedEngine final : public Engine {
 public:
  explicit ThreadedEngine(const EngineOptions& options);
  ~ThreadedEngine() override;

  VarHandle NewVariable() override;
  void DeleteVariable(SyncFn deleter, Device device, VarHandle var) override;
  void WaitForVar(VarHandle var) override;
  void WaitForAll() override;
  void Shutdown() override;
  void StartProfiling(const std::string& path) override { profiler_.Start(path); }
  void StopProfiling() override;
  bool profiling() const override { return profiler_.running(); }
  EngineKind kind() const override { return EngineKind::kThreaded; }

 protected:
  void Push(SyncFn sync, AsyncFn async, const PushArgs& args) override;

 private:
  OprBlock* NewOpr(SyncFn sync, AsyncFn async, const PushArgs& args);
  void Admit(OprBlock* op);
  // Checks the op's vars, appends it to each, and dispatches it if every var granted it. Not
  // checked by the thread-safety analysis: it locks a set of vars known at run time (in address
  // order), which the analysis cannot follow.
  void Register(OprBlock* op) WEFT_NO_THREAD_SAFETY_ANALYSIS;
  void InheritError(OprBlock* op, ThreadedVar* var);
  // Sends a ready op where its property says (a worker pool, a device, this thread for kAsync).
  void Dispatch(OprBlock* op);
  // Dispatch for an op ready at push: a kCpuSmall op may run at once on the pushing thread.
  void DispatchPushed(OprBlock* op);
  void RunInline(OprBlock* op);
  // Runs a ready op: skips it if an input failed, makes its device waits, runs its body.
  void Execute(OprBlock* op, int worker, GpuStream* stream);
  std::exception_ptr RunBody(OprBlock* op, const RunContext& ctx, uint64_t profiled_op);
  // What every worker pool runs an op with: Execute.
  WorkerPool::Runner WorkerRunner();
  // Ends an op: stores its error (raised, or propagated from an input) on the vars it writes,
  // releases its vars, frees it.
  void Finish(OprBlock* op, std::shared_ptr<Failure> failure, std::exception_ptr raised);
  static void CompleteAsync(void* engine, void* op, std::exception_ptr error,
                            bool device_work_done);
  void CountFinished();
  bool Idle() const;
  void WaitUntilIdle();
  // With the engine idle: waits for the device work queued so far, then writes the trace.
  void StopProfilingWhenIdle(bool report_only);

  const EngineOptions options_;
  Profiler profiler_;
  WorkerPool cpu_;
  WorkerPool cpu_priority_;
  DeviceOrdering device_;  // the GPU workers and the device work around ops
  FailureLog failures_;
  VarRegistry vars_;

  // Ops pushed, and ops finished, on separate cache lines so that pushing does not contend with
  // the workers. Idle when finished_ (read first) equals pushed_. finished_ and idle_waiters_ are
  // a Dekker pair (seq_cst both sides): a finisher that makes the counts equal either sees the
  // waiter and notifies, or the waiter sees the counts equal.
  alignas(64) std::atomic<int64_t> pushed_{0};
  alignas(64) std::atomic<int64_t> finished_{0};
  alignas(64) std::atomic<int> idle_waiters_{0};
  std::atomic<int> finishing_{0};  // threads inside CountFinished (the destructor waits for 0)
  Mutex idle_mu_;
  std::condition_variable idle_cv_;

  Mutex shutdown_mu_;
  bool shut_down_ WEFT_GUARDED_BY(shutdown_mu_) = false;
  alignas(64) std::atomic<bool> accepting_{true};  // cleared by Shutdown; pushes after it throw
};

}  // namespace weft::engine
