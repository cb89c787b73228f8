// ThreadedEngine, the push side: registering an op with its vars, dispatching it when they grant
// it, running it, and finishing it (which grants the next ops). The wait side (WaitForVar,
// WaitForAll, Shutdown) is threaded_engine_wait.cc.
#include "engine/internal/threaded_engine.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <utility>

#include "core/error.h"
#include "core/mutex.h"
#include "core/object_pool.h"
#include "core/small_vector.h"
#include "engine/internal/routing.h"
#include "engine/internal/threaded_var.h"

namespace weft::engine {

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

void ThreadedEngine::Register(OprBlock* op) {
  Admit(op);
  if (op->deletes_var) op->vars.writes()[0]->MarkDeleted();
  const auto all = op->vars.all();
  op->wait.store(static_cast<int>(all.size()) + 1, std::memory_order_relaxed);
  // Lock every var in address order, append, unlock: see ThreadedVar::lock.
  SmallVector<ThreadedVar*, OprVars::kInline> order;
  for (ThreadedVar* v : all) order.push_back(v);
  std::sort(order.begin(), order.end());
  for (ThreadedVar* v : order) v->lock();
  // The vars that granted the op at once; only those may be read for errors now, and under
  // their locks, as ThreadedVar's Complete* do for the ops they grant.
  int granted = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool now =
        i < op->vars.writes().size() ? all[i]->AppendWriteLocked(op) : all[i]->AppendReadLocked(op);
    if (!now) continue;
    InheritError(op, all[i]);
    ++granted;
  }
  for (ThreadedVar* v : order) v->unlock();
  // Drop the pusher's hold and the grants received; whoever takes the count to zero dispatches.
  const int drop = granted + 1;
  if (op->wait.fetch_sub(drop, std::memory_order_acq_rel) == drop) DispatchPushed(op);
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

// Called when `var` grants `op`, by the granting thread with the var's lock held: the var's error
// (from the write before this access) is what the op will see. Under the lock, so that no access
// pushed after `op` (a WaitForVar that reports and clears the error) is granted before it.
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
  // An async op may finish (and be freed) inside its function: keep what is needed after it.
  const ProfileStamp stamp = op->profile = profiler_.Begin();
  const char* name = op->name;
  const bool sync = static_cast<bool>(op->sync);
  std::exception_ptr raised = RunBody(op, RunContext{op->device, stream, worker}, stamp.op);
  if (stamp.op != 0) profiler_.RecordSpan(name, stamp, ProfilerClockNs());
  // A sync op is done now; an async one when it completes (CompleteAsync), unless it threw.
  if (sync || raised) Finish(op, nullptr, std::move(raised));
}

// Calls the op's function (sync, or async handing over CompleteAsync) in the profiler's scope of
// the op. Returns what the function threw, else null.
std::exception_ptr ThreadedEngine::RunBody(OprBlock* op, const RunContext& ctx,
                                           uint64_t profiled_op) {
  ProfiledOpScope profiled(profiled_op);
  try {
    if (op->sync) {
      op->sync(ctx);
    } else {
      op->async(ctx, OnComplete(&ThreadedEngine::CompleteAsync, this, op));
    }
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
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
    auto inherit = [this](OprBlock* next, ThreadedVar* var) { InheritError(next, var); };
    auto grant = [this](OprBlock* next, ThreadedVar*) {
      if (next->DecrementWait()) Dispatch(next);
    };
    for (ThreadedVar* v : op->vars.reads()) v->CompleteRead(inherit, grant);
    for (ThreadedVar* v : op->vars.writes()) v->CompleteWrite(inherit, grant);
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
    MutexLock lock(&idle_mu_);
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

}  // namespace weft::engine
