#include "engine/internal/threaded_engine.h"

#include <cstdio>
#include <utility>

#include "core/error.h"
#include "engine/internal/object_pool.h"
#include "engine/internal/routing.h"
#include "engine/internal/threaded_var.h"

namespace weft::engine {

ThreadedEngine::ThreadedEngine(const EngineOptions& options)
    : options_(options),
      profiler_(options.profile_path.empty() ? nullptr : std::make_unique<Profiler>(options.profile_path)),
      cpu_("cpu worker", options.cpu_workers, /*first_worker_id=*/0,
           [this](OprBlock* op, int worker) { Execute(op, worker); }),
      cpu_priority_("cpu priority worker", options.cpu_priority_workers, options.cpu_workers,
                    [this](OprBlock* op, int worker) { Execute(op, worker); }) {
  WEFT_CHECK_GE(options.cpu_workers, 1) << "the engine needs at least one CPU worker";
  WEFT_CHECK_GE(options.cpu_priority_workers, 1) << "the engine needs at least one priority worker";
  if (profiler_) {
    for (const WorkerPool* pool : {&cpu_, &cpu_priority_}) {
      for (int i = 0; i < pool->num_workers(); ++i) {
        profiler_->NameTrack(pool->worker_id(i), pool->name() + " " + std::to_string(i));
      }
    }
  }
}

ThreadedEngine::~ThreadedEngine() {
  Shutdown();
  vars_.DestroyAll([](Var* v) { ObjectPool<ThreadedVar>::Delete(static_cast<ThreadedVar*>(v)); });
}

VarHandle ThreadedEngine::NewVariable() {
  ThreadedVar* v = ObjectPool<ThreadedVar>::New(this);
  vars_.Add(v);
  return v;
}

OprBlock* ThreadedEngine::NewOpr(SyncFn sync, AsyncFn async, const PushArgs& args) {
  WEFT_CHECK(accepting_.load(std::memory_order_acquire))
      << "op '" << (args.name ? args.name : "op") << "' pushed after the engine was shut down";
  CheckRoutable(args.device, args.prop, args.name);
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

void ThreadedEngine::Register(OprBlock* op) {
  try {
    for (ThreadedVar* v : op->vars.all()) v->CheckNotDeleted();
  } catch (...) {
    ObjectPool<OprBlock>::Delete(op);
    throw;
  }
  if (op->deletes_var) op->vars.writes()[0]->MarkDeleted();
  pushed_.fetch_add(1, std::memory_order_seq_cst);
  const int total = static_cast<int>(op->vars.all().size()) + 1;
  op->wait.store(total, std::memory_order_relaxed);
  int granted = 0;
  for (ThreadedVar* v : op->vars.writes()) granted += v->AppendWrite(op);
  for (ThreadedVar* v : op->vars.reads()) granted += v->AppendRead(op);
  // Drop the pusher's hold and the grants received; whoever takes the count to zero dispatches.
  if (op->wait.fetch_sub(granted + 1, std::memory_order_acq_rel) == granted + 1) Dispatch(op);
}

void ThreadedEngine::Dispatch(OprBlock* op) {
  switch (op->prop) {
    case FnProperty::kAsync:
      Execute(op, -1);
      return;
    case FnProperty::kCpuPrioritized:
      cpu_priority_.Submit(op, op->priority);
      return;
    default:
      cpu_.Submit(op, op->priority);
      return;
  }
}

void ThreadedEngine::Execute(OprBlock* op, int worker) {
  if (!op->no_skip) {
    for (ThreadedVar* v : op->vars.all()) {
      if (const ErrorSlot* error = v->LiveError()) {
        Finish(op, error->failure, nullptr);
        return;
      }
    }
  }
  RunContext ctx{op->device, nullptr, worker};
  if (profiler_) {
    op->start_ns = profiler_->NowNs();
    op->track = WorkerPool::CurrentTrack();
  }
  if (op->sync) {
    std::exception_ptr raised;
    try {
      op->sync(ctx);
    } catch (...) {
      raised = std::current_exception();
    }
    if (profiler_) RecordSpan(*op, profiler_->NowNs());
    Finish(op, nullptr, std::move(raised));
    return;
  }
  // The op may finish (and be freed) inside its function: keep what the span needs.
  const char* name = op->name;
  const int64_t start_ns = op->start_ns;
  const int track = op->track;
  try {
    op->async(ctx, OnComplete(&ThreadedEngine::CompleteAsync, this, op));
  } catch (...) {
    Finish(op, nullptr, std::current_exception());
  }
  if (profiler_) profiler_->RecordSpan(name, track, start_ns, profiler_->NowNs());
}

void ThreadedEngine::CompleteAsync(void* engine, void* op, std::exception_ptr error) {
  auto* self = static_cast<ThreadedEngine*>(engine);
  auto* block = static_cast<OprBlock*>(op);
  if (self->profiler_) self->profiler_->RecordAsyncSpan(block->name, block->start_ns, self->profiler_->NowNs());
  self->Finish(block, nullptr, std::move(error));
}

void ThreadedEngine::RecordSpan(const OprBlock& op, int64_t end_ns) {
  profiler_->RecordSpan(op.name, op.track, op.start_ns, end_ns);
}

void ThreadedEngine::Finish(OprBlock* op, std::shared_ptr<Failure> failure, std::exception_ptr raised) {
  if (raised) failure = failures_.Add(std::move(raised));
  // This op still holds its write vars exclusively, so it may set their error slots.
  for (ThreadedVar* v : op->vars.writes()) {
    if (failure) {
      v->SetError(failure);
    } else if (v->error_slot()) {
      v->ClearError();
    }
  }
  auto grant = [this](OprBlock* next) {
    if (next->DecrementWait()) Dispatch(next);
  };
  for (ThreadedVar* v : op->vars.reads()) v->CompleteRead(grant);
  for (ThreadedVar* v : op->vars.writes()) v->CompleteWrite(grant);
  if (op->deletes_var) {
    vars_.Remove(op->vars.writes()[0]);
    ObjectPool<ThreadedVar>::Delete(op->vars.writes()[0]);
  }
  ObjectPool<OprBlock>::Delete(op);
  const int64_t finished = finished_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (idle_waiters_.load(std::memory_order_seq_cst) > 0 &&
      finished >= wait_target_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> lock(idle_mu_);
    idle_cv_.notify_all();
  }
}

void ThreadedEngine::DeleteVariable(SyncFn deleter, Device device, VarHandle var) {
  const VarHandle writes[] = {var};
  PushArgs args{device, {}, writes, FnProperty::kNormal, 0, "DeleteVariable"};
  OprBlock* op = NewOpr(std::move(deleter), nullptr, args);
  op->deletes_var = true;
  op->no_skip = true;
  Register(op);
}

void ThreadedEngine::WaitForVar(VarHandle var) {
  WEFT_CHECK(!WorkerPool::OnWorkerThread()) << "WaitForVar called inside an engine op would deadlock";
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::shared_ptr<ErrorSlot> slot;
  } waiter;
  // A read that runs inline as soon as every earlier write is done; it never waits for reads.
  const VarHandle reads[] = {var};
  PushArgs args{Device::Cpu(), reads, {}, FnProperty::kAsync, 0, "WaitForVar"};
  OprBlock* op = NewOpr(
      [&waiter, var](RunContext) {
        std::lock_guard<std::mutex> lock(waiter.mu);
        waiter.slot = var->error_slot();
        waiter.done = true;
        waiter.cv.notify_all();  // under the lock: `waiter` dies once the waiter sees done
      },
      nullptr, args);
  op->no_skip = true;
  Register(op);
  std::unique_lock<std::mutex> lock(waiter.mu);
  waiter.cv.wait(lock, [&] { return waiter.done; });
  RethrowIfLive(waiter.slot);
}

void ThreadedEngine::WaitUntilIdle() {
  const int64_t target = pushed_.load(std::memory_order_seq_cst);
  std::unique_lock<std::mutex> lock(idle_mu_);
  idle_waiters_.fetch_add(1, std::memory_order_seq_cst);
  if (target > wait_target_.load(std::memory_order_seq_cst)) wait_target_.store(target, std::memory_order_seq_cst);
  idle_cv_.wait(lock, [&] { return finished_.load(std::memory_order_seq_cst) >= target; });
  if (idle_waiters_.fetch_sub(1, std::memory_order_seq_cst) == 1) wait_target_.store(0, std::memory_order_seq_cst);
}

void ThreadedEngine::WaitForAll() {
  WEFT_CHECK(!WorkerPool::OnWorkerThread()) << "WaitForAll called inside an engine op would deadlock";
  WaitUntilIdle();
  failures_.RethrowAndRetire();
}

void ThreadedEngine::Shutdown() {
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (WorkerPool::OnWorkerThread()) {
    // exit() called from inside an op: this thread cannot wait for itself. Nothing is joined;
    // the process is ending.
    accepting_.store(false, std::memory_order_release);
    return;
  }
  WaitUntilIdle();  // ops may still push follow-up ops while draining
  accepting_.store(false, std::memory_order_release);
  WaitUntilIdle();
  failures_.ReportUnobserved();
  cpu_.Stop();
  cpu_priority_.Stop();
  if (profiler_) profiler_->WriteOrReport();
}

}  // namespace weft::engine
