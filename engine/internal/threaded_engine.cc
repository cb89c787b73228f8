#include "engine/internal/threaded_engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/object_pool.h"
#include "engine/internal/routing.h"
#include "engine/internal/threaded_var.h"
#include "engine/wait_helper.h"

namespace weft::engine {

namespace {

// How long a waiting thread watches for its op before it sleeps: a short op's completion then
// costs no wake-up of the waiter (a futex wake and a reschedule, about 4-5 us of a 13 us CPU
// all-reduce's round trip here). Like an idle worker's spin (task_queue.h), it yields every 64
// looks, so a thread that shares its core runs meanwhile.
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

ThreadedEngine::ThreadedEngine(const EngineOptions& options)
    : options_(options),
      cpu_("cpu worker", options.cpu_workers, /*first_worker_id=*/0, WorkerRunner()),
      cpu_priority_("cpu priority worker", options.cpu_priority_workers, options.cpu_workers,
                    WorkerRunner()),
      device_(GetDeviceBackend(DeviceType::kGpu),
              options.cpu_workers + options.cpu_priority_workers, WorkerRunner(), accepting_,
              &profiler_) {
  WEFT_CHECK_GE(options.cpu_workers, 1) << "the engine needs at least one CPU worker";
  WEFT_CHECK_GE(options.cpu_priority_workers, 1) << "the engine needs at least one priority worker";
  for (const WorkerPool* pool : {&cpu_, &cpu_priority_}) {
    for (int i = 0; i < pool->num_workers(); ++i) {
      profiler_.NameTrack(pool->worker_id(i), pool->name() + " " + std::to_string(i));
    }
  }
  if (!options.profile_path.empty()) profiler_.Start(options.profile_path);
}

ThreadedEngine::~ThreadedEngine() {
  Shutdown();
  while (finishing_.load(std::memory_order_seq_cst) > 0) std::this_thread::yield();
  vars_.DestroyAll([this](Var* v) {
    if (device_.enabled()) device_.DestroyState(v->sync());
    ObjectPool<ThreadedVar>::Delete(static_cast<ThreadedVar*>(v));
  });
}

WorkerPool::Runner ThreadedEngine::WorkerRunner() {
  return [this](OprBlock* op, int worker, GpuStream* stream) { Execute(op, worker, stream); };
}

VarHandle ThreadedEngine::NewVariable() {
  if (Var* v = vars_.Revive()) return v;
  ThreadedVar* v = ObjectPool<ThreadedVar>::New(this);
  vars_.Add(v);
  return v;
}

OprBlock* ThreadedEngine::NewOpr(SyncFn sync, AsyncFn async, const PushArgs& args) {
  CheckRoutable(args.device, args.prop, args.name);
  if (args.device.is_gpu()) device_.Workers(args.device.id);
  OprBlock* op = ObjectPool<OprBlock>::New();
  try {
    op->vars.Assign(args.reads, args.writes, this, args.name);
  } catch (...) {
    ObjectPool<OprBlock>::Delete(op);
    throw;
  }
  op->sync = std::move(sync);
  op->async = std::move(async);
  op->device = args.device;
  op->prop = args.prop;
  op->priority = args.priority;
  op->name = args.name;
  return op;
}

void ThreadedEngine::Push(SyncFn sync, AsyncFn async, const PushArgs& args) {
  Register(NewOpr(std::move(sync), std::move(async), args));
}

// Counts the op as pushed, then checks the engine still accepts work: Shutdown clears
// accepting_ before it waits for pushed == finished, so either it sees this op or this op sees
// the engine closed (and is counted as finished at once). Its vars were checked by NewOpr.
void ThreadedEngine::Admit(OprBlock* op) {
  pushed_.fetch_add(1, std::memory_order_seq_cst);
  try {
    WEFT_CHECK(accepting_.load(std::memory_order_seq_cst))
        << "op '" << (op->name ? op->name : "op") << "' pushed after the engine was shut down";
  } catch (...) {
    ObjectPool<OprBlock>::Delete(op);
    CountFinished();
    throw;
  }
}

namespace {
size_t all_size(const OprBlock& op) { return op.vars.all().size(); }
}  // namespace

void ThreadedEngine::Register(OprBlock* op) {
  Admit(op);
  if (op->deletes_var) op->vars.writes()[0]->MarkDeleted();
  op->wait.store(static_cast<int>(op->vars.all().size()) + 1, std::memory_order_relaxed);
  // Lock every var in address order, append, unlock: see ThreadedVar::lock.
  std::array<ThreadedVar*, OprVars::kInline> inline_order;
  std::vector<ThreadedVar*> heap_order;
  std::span<ThreadedVar*> order = SortedVars(*op, inline_order, heap_order);
  for (ThreadedVar* v : order) v->lock();
  // Which vars granted the op at once; only those may be read for errors now.
  std::array<bool, OprVars::kInline> inline_granted{};
  std::vector<bool> heap_granted(all_size(*op) > inline_granted.size() ? all_size(*op) : 0);
  auto set_granted = [&](size_t i) {
    if (heap_granted.empty())
      inline_granted[i] = true;
    else
      heap_granted[i] = true;
  };
  int granted = 0;
  const auto all = op->vars.all();
  for (size_t i = 0; i < all.size(); ++i) {
    const bool now =
        i < op->vars.writes().size() ? all[i]->AppendWriteLocked(op) : all[i]->AppendReadLocked(op);
    if (now) ++granted, set_granted(i);
  }
  for (ThreadedVar* v : order) v->unlock();
  for (size_t i = 0; i < all.size(); ++i) {
    if (heap_granted.empty() ? inline_granted[i] : heap_granted[i]) InheritError(op, all[i]);
  }
  // Drop the pusher's hold and the grants received; whoever takes the count to zero dispatches.
  if (op->wait.fetch_sub(granted + 1, std::memory_order_acq_rel) == granted + 1) DispatchPushed(op);
}

namespace {
// Set while this thread runs an op on the pushing thread: an op that op's body pushes goes to a
// worker (it would share this thread's workspace with the op still running).
thread_local bool tls_running_pushed = false;
}  // namespace

// An op every var granted at its push. A small CPU op runs here, on the pushing thread, when
// that thread is not inside an op (a worker's op, or one run here) and no device op has touched
// its vars (else its device waits would block the pusher). It holds every var it names, so the
// write order and the errors it inherits are exactly those of a worker's run.
void ThreadedEngine::DispatchPushed(OprBlock* op) {
  if (op->prop != FnProperty::kCpuSmall || tls_running_pushed || WorkerPool::OnWorkerThread()) {
    Dispatch(op);
    return;
  }
  if (device_.enabled()) {
    for (ThreadedVar* v : op->vars.all()) {
      // The op holds v, so no device op can attach work to it meanwhile.
      if (v->sync().state.load(std::memory_order_acquire) != nullptr) {
        Dispatch(op);
        return;
      }
    }
  }
  struct Running {
    Running() { tls_running_pushed = true; }
    ~Running() { tls_running_pushed = false; }
  } running;
  Execute(op, -1, nullptr);
}

std::span<ThreadedVar*> ThreadedEngine::SortedVars(
    const OprBlock& op, std::array<ThreadedVar*, OprVars::kInline>& inline_order,
    std::vector<ThreadedVar*>& heap_order) {
  const auto all = op.vars.all();
  ThreadedVar** data = inline_order.data();
  if (all.size() > inline_order.size()) {
    heap_order.assign(all.begin(), all.end());
    data = heap_order.data();
  } else {
    std::copy(all.begin(), all.end(), data);
  }
  std::sort(data, data + all.size());
  return {data, all.size()};
}

// Called when `var` grants `op`, by the granting thread: the var's error (from the write before
// this access) is what the op will see.
void ThreadedEngine::InheritError(OprBlock* op, ThreadedVar* var) {
  if (op->no_skip) return;
  const ErrorSlot* error = var->LiveError();
  if (error == nullptr) return;
  Failure* expected = nullptr;
  op->inherited.compare_exchange_strong(expected, error->failure.get(), std::memory_order_acq_rel);
}

void ThreadedEngine::Dispatch(OprBlock* op) {
  switch (op->prop) {
    case FnProperty::kAsync:
      RunInline(op);
      return;
    case FnProperty::kCpuPrioritized:
      cpu_priority_.Submit(op, op->priority);
      return;
    default:  // kCpuSmall made ready by a completion, or pushed where it cannot run at once, too
      if (op->device.is_gpu()) {
        device_.Submit(op);
        return;
      }
      cpu_.Submit(op, op->priority);
      return;
  }
}

// kAsync ops run on the thread that makes them ready. One made ready while another runs inline
// on this thread waits in a thread-local queue, so a chain of them runs in a loop, not in nested
// calls (a long chain would otherwise overflow the stack).
void ThreadedEngine::RunInline(OprBlock* op) {
  thread_local std::deque<OprBlock*>* queue = nullptr;
  if (queue != nullptr) {
    queue->push_back(op);
    return;
  }
  std::deque<OprBlock*> local{op};
  queue = &local;
  while (!local.empty()) {
    OprBlock* next = local.front();
    local.pop_front();
    Execute(next, -1, nullptr);
  }
  queue = nullptr;
}

void ThreadedEngine::Execute(OprBlock* op, int worker, GpuStream* stream) {
  if (Failure* failure = op->inherited.load(std::memory_order_acquire)) {
    Finish(op, failure->shared_from_this(), nullptr);
    return;
  }
  if (device_.enabled() && op->device_sync) {
    try {
      device_.Prepare(op, stream);
    } catch (...) {
      Finish(op, nullptr, std::current_exception());
      return;
    }
  }
  RunContext ctx{op->device, stream, worker};
  // The op may finish (and be freed) inside an async function: keep what the span needs.
  const ProfileStamp stamp = op->profile = profiler_.Begin();
  const char* name = op->name;
  if (op->sync) {
    std::exception_ptr raised;
    {
      ProfiledOpScope profiled(stamp.op);
      try {
        op->sync(ctx);
      } catch (...) {
        raised = std::current_exception();
      }
    }
    if (stamp.op != 0) profiler_.RecordSpan(name, stamp, ProfilerClockNs());
    Finish(op, nullptr, std::move(raised));
    return;
  }
  {
    ProfiledOpScope profiled(stamp.op);
    try {
      op->async(ctx, OnComplete(&ThreadedEngine::CompleteAsync, this, op));
    } catch (...) {
      Finish(op, nullptr, std::current_exception());
    }
  }
  if (stamp.op != 0) profiler_.RecordSpan(name, stamp, ProfilerClockNs());
}

void ThreadedEngine::CompleteAsync(void* engine, void* op, std::exception_ptr error,
                                   bool device_work_done) {
  auto* self = static_cast<ThreadedEngine*>(engine);
  auto* block = static_cast<OprBlock*>(op);
  block->device_work_done = device_work_done;
  if (block->profile.op != 0)
    self->profiler_.RecordAsyncSpan(block->name, block->profile, ProfilerClockNs());
  self->Finish(block, nullptr, std::move(error));
}

void ThreadedEngine::Finish(OprBlock* op, std::shared_ptr<Failure> failure,
                            std::exception_ptr raised) {
  if (op->ran) {
    std::exception_ptr device_error = device_.Complete(op);
    if (!raised) raised = std::move(device_error);
  }
  if (raised) failure = failures_.Add(std::move(raised));
  // This op still holds its write vars exclusively, so it may set their error slots.
  for (ThreadedVar* v : op->vars.writes()) {
    if (failure) {
      v->SetError(failure);
    } else if (v->error_slot()) {
      v->ClearError();
    }
  }
  {
    WorkerPool::FinishScope finishing;  // ops made ready here may continue on this worker
    auto grant = [this](OprBlock* next, ThreadedVar* var) {
      InheritError(next, var);
      if (next->DecrementWait()) Dispatch(next);
    };
    for (ThreadedVar* v : op->vars.reads()) v->CompleteRead(grant);
    for (ThreadedVar* v : op->vars.writes()) v->CompleteWrite(grant);
  }
  if (op->deletes_var) {
    if (device_.enabled()) device_.DestroyState(op->vars.writes()[0]->sync());
    vars_.Retire(op->vars.writes()[0]);  // its queue is empty: the delete was its last access
  }
  ObjectPool<OprBlock>::Delete(op);
  CountFinished();
}

// The last thing Finish does with the engine. finishing_ covers the window in which a waiter
// may already see the count and let the engine be destroyed: the destructor waits it out.
void ThreadedEngine::CountFinished() {
  finishing_.fetch_add(1, std::memory_order_seq_cst);
  const int64_t finished = finished_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (idle_waiters_.load(std::memory_order_seq_cst) > 0 &&
      finished == pushed_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(idle_mu_);
    idle_cv_.notify_all();
  }
  finishing_.fetch_sub(1, std::memory_order_seq_cst);
}

void ThreadedEngine::DeleteVariable(SyncFn deleter, Device device, VarHandle var) {
  const VarHandle writes[] = {var};
  // A deleter frees memory: on the CPU it is a small op, run at once when the var is free.
  const FnProperty prop = device.is_cpu() ? FnProperty::kCpuSmall : FnProperty::kNormal;
  PushArgs args{device, {}, writes, prop, 0, "DeleteVariable"};
  OprBlock* op = NewOpr(std::move(deleter), nullptr, args);
  op->deletes_var = true;
  op->no_skip = true;
  Register(op);
}

void ThreadedEngine::WaitForVar(VarHandle var) {
  WEFT_CHECK(!WorkerPool::OnWorkerThread())
      << "WaitForVar called inside an engine op would deadlock";
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::atomic<bool> ready{false};  // done, for the spin before the sleep
    std::shared_ptr<ErrorSlot> slot;
    Completion device_write = nullptr;  // the device work that wrote var, waited for below
  } waiter;
  // A read that runs inline as soon as every earlier write is done; it never waits for reads.
  const VarHandle reads[] = {var};
  PushArgs args{Device::Cpu(), reads, {}, FnProperty::kAsync, 0, "WaitForVar"};
  DeviceOrdering* device = &device_;
  OprBlock* op = NewOpr(
      [&waiter, var, device](RunContext) {
        std::lock_guard<std::mutex> lock(waiter.mu);
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
  std::unique_lock<std::mutex> lock(waiter.mu);
  waiter.cv.wait(lock, [&] { return waiter.done; });
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
  std::unique_lock<std::mutex> lock(idle_mu_);
  idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
  idle_cv_.wait(lock, [this] { return Idle(); });
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
  std::lock_guard<std::mutex> lock(shutdown_mu_);
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
