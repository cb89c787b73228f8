// ThreadedEngine, the wait side: WaitForVar (a read op that wakes the waiting thread), waiting
// until every op pushed has finished (WaitForAll, Shutdown, StopProfiling), and shutting down.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/mutex.h"
#include "engine/internal/threaded_engine.h"
#include "engine/internal/threaded_var.h"
#include "engine/wait_helper.h"

namespace weft::engine {

namespace {

// How long a waiting thread watches for its op before it sleeps: a short op's completion then
// costs no wake-up of the waiter (a futex wake and a reschedule, a large share of a small CPU
// all-reduce's round trip: dist_bench measures it, figures in bench/README.md, "Figures moved
// from comments"). Like an idle worker's spin (task_queue.h), it yields every 64 looks, so a
// thread that shares its core runs meanwhile.
constexpr std::chrono::microseconds kWaitSpin{50};

// Watches `flag` until it is set (true) or kWaitSpin has passed (false), running the wait helper
// (wait_helper.h) meanwhile: the work it drives may be what sets the flag.
bool SpinUntil(const std::atomic<bool>& flag) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; !flag.load(std::memory_order_acquire); ++i) {
    const bool helped = HelpWhileWaiting();
    if (i % 64 != 0) continue;
    if (std::chrono::steady_clock::now() - start > kWaitSpin) return false;
    if (!helped) std::this_thread::yield();  // with work in hand, look again at once
  }
  return true;
}

}  // namespace

void ThreadedEngine::WaitForVar(VarHandle var) {
  WEFT_CHECK(!WorkerPool::OnWorkerThread())
      << "WaitForVar called inside an engine op would deadlock";
  struct Waiter {
    Mutex mu;
    std::condition_variable cv;
    bool done WEFT_GUARDED_BY(mu) = false;
    std::atomic<bool> ready{false};  // done, for the spin before the sleep
    std::shared_ptr<ErrorSlot> slot WEFT_GUARDED_BY(mu);
    // The device work that wrote var, waited for below.
    Completion device_write WEFT_GUARDED_BY(mu) = nullptr;
  } waiter;
  // A read that runs inline as soon as every earlier write is done; it never waits for reads.
  const VarHandle reads[] = {var};
  PushArgs args{Device::Cpu(), reads, {}, FnProperty::kAsync, 0, "WaitForVar"};
  DeviceOrdering* device = &device_;
  OprBlock* op = NewOpr(
      [&waiter, var, device](RunContext) {
        MutexLock lock(&waiter.mu);
        waiter.slot = var->error_slot();
        if (device->enabled())
          waiter.device_write = device->CaptureWriter(static_cast<ThreadedVar*>(var)->sync());
        waiter.done = true;
        waiter.ready.store(true, std::memory_order_release);
        waiter.cv.notify_all();  // under the lock: `waiter` dies once the waiter sees done
      },
      nullptr, args);
  op->no_skip = true;
  op->device_sync = false;  // the waiting thread waits for the device work, not the worker
  Register(op);
  SpinUntil(waiter.ready);
  // Taken either way: after a spin that saw `ready`, it waits out the op's critical section (its
  // notify), so `waiter` outlives every use of it.
  MutexLock lock(&waiter.mu);
  lock.Wait(waiter.cv, [&]() WEFT_REQUIRES(waiter.mu) { return waiter.done; });
  if (waiter.device_write != nullptr) device_.WaitAndRelease(waiter.device_write);
  RethrowIfLive(waiter.slot);
}

// Waits for an instant at which every op pushed so far has finished: finished_ read before
// pushed_ and equal to it (both only grow, and an op is counted pushed before it can finish).
bool ThreadedEngine::Idle() const {
  const int64_t finished = finished_.load(std::memory_order_seq_cst);
  return finished == pushed_.load(std::memory_order_seq_cst);
}

void ThreadedEngine::WaitUntilIdle() {
  MutexLock lock(&idle_mu_);
  idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
  lock.Wait(idle_cv_, [this] { return Idle(); });
  idle_waiters_.fetch_sub(1, std::memory_order_seq_cst);
}

void ThreadedEngine::WaitForAll() {
  WEFT_CHECK(!WorkerPool::OnWorkerThread())
      << "WaitForAll called inside an engine op would deadlock";
  WaitUntilIdle();
  device_.Synchronize();
  // Errors kernels found that no wait raised are retired with the ops' failures, which come first.
  const std::exception_ptr device_error = device_.enabled() ? device_.RetireErrors() : nullptr;
  failures_.RethrowAndRetire();
  if (device_error) std::rethrow_exception(device_error);
}

void ThreadedEngine::Shutdown() {
  MutexLock lock(&shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (WorkerPool::OnWorkerThread()) {
    // exit() called from inside an op: this thread cannot wait for itself. Stop the pools (the
    // other workers drain what is queued and are joined; this one is detached) so nothing runs
    // while the engine is torn down around them.
    accepting_.store(false, std::memory_order_seq_cst);
    cpu_.Stop();
    cpu_priority_.Stop();
    device_.StopKeeping();  // this thread may be one of theirs
    return;
  }
  WaitUntilIdle();  // ops may still push follow-up ops while draining
  accepting_.store(false, std::memory_order_seq_cst);
  WaitUntilIdle();
  failures_.ReportUnobserved();
  cpu_.Stop();
  cpu_priority_.Stop();
  if (profiler_.running()) StopProfilingWhenIdle(/*report_only=*/true);  // before the streams go
  device_.Stop();
}

void ThreadedEngine::StopProfiling() {
  WEFT_CHECK(!WorkerPool::OnWorkerThread())
      << "StopProfiling called inside an engine op would deadlock";
  profiler_.CheckRunning();
  WaitUntilIdle();
  StopProfilingWhenIdle(/*report_only=*/false);
}

void ThreadedEngine::StopProfilingWhenIdle(bool report_only) {
  try {
    device_.Synchronize();
  } catch (const Error&) {
    // A device fault belongs to the op that caused it, which reports it; the trace is written.
  }
  const std::vector<NamedStream> streams = device_.Streams();
  if (report_only) {
    profiler_.StopOrReport(streams);
  } else {
    profiler_.Stop(streams);
  }
}

}  // namespace weft::engine
