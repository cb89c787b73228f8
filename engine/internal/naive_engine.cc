#include "engine/internal/naive_engine.h"

#include <condition_variable>
#include <cstdio>
#include <mutex>

#include "core/error.h"
#include "core/mutex.h"
#include "engine/internal/routing.h"
#include "engine/internal/var.h"
#include "engine/internal/worker_pool.h"

namespace weft::engine {

class NaiveEngine::NaiveVar : public Var {
 public:
  explicit NaiveVar(const void* owner) : Var(owner) {}
};

NaiveEngine::NaiveEngine(const EngineOptions& options) {
  if (!options.profile_path.empty()) profiler_.Start(options.profile_path);
}

NaiveEngine::~NaiveEngine() {
  Shutdown();
  vars_.DestroyAll([](Var* v) { delete static_cast<NaiveVar*>(v); });
}

VarHandle NaiveEngine::NewVariable() {
  if (Var* v = vars_.Revive()) return v;
  auto v = std::make_unique<NaiveVar>(this);
  vars_.Add(v.get());
  return v.release();  // owned by vars_
}

NaiveEngine::NaiveVar* NaiveEngine::Checked(VarHandle v, const char* name) const {
  CheckVar(v, this, name);
  return static_cast<NaiveVar*>(v);
}

GpuStream* NaiveEngine::StreamOf(int device) {
  if (static_cast<int>(gpu_streams_.size()) <= device) gpu_streams_.resize(device + 1, nullptr);
  if (gpu_streams_[device] == nullptr)
    gpu_streams_[device] = gpu_->CreateStream(device, StreamKind::kCompute);
  gpu_->BindThread(device);
  return gpu_streams_[device];
}

namespace {

// Runs an op's function on this thread, and waits for an async op to complete (maybe on another
// thread). Returns what an async op completed with; throws what the function throws.
std::exception_ptr CallOp(const SyncFn& sync, const AsyncFn& async, const RunContext& ctx,
                          void* engine) {
  if (sync) {
    sync(ctx);
    return nullptr;
  }
  struct AsyncResult {
    Mutex mu;
    std::condition_variable cv;
    bool done WEFT_GUARDED_BY(mu) = false;
    std::exception_ptr error WEFT_GUARDED_BY(mu);
  } result;
  auto complete = [](void*, void* c, std::exception_ptr error,
                     bool /*device_work_done: the wait below is cheap*/) {
    auto* state = static_cast<AsyncResult*>(c);
    MutexLock lock(&state->mu);
    state->error = std::move(error);
    state->done = true;
    state->cv.notify_all();
  };
  async(ctx, OnComplete(complete, engine, &result));
  MutexLock lock(&result.mu);
  lock.Wait(result.cv, [&]() WEFT_REQUIRES(result.mu) { return result.done; });
  return result.error;
}

}  // namespace

std::exception_ptr NaiveEngine::Run(const SyncFn& sync, const AsyncFn& async,
                                    const PushArgs& args) {
  RunContext ctx{args.device, nullptr, -1};
  const ProfileStamp stamp = profiler_.Begin();
  std::exception_ptr raised;
  try {
    ProfiledOpScope profiled(stamp.op);
    if (args.device.is_gpu()) ctx.stream = StreamOf(args.device.id);
    raised = CallOp(sync, async, ctx, this);
  } catch (...) {
    raised = std::current_exception();
  }
  // Every op's device work is done before the next op runs: no var needs device ordering. The
  // wait raises a CUDA error, or an error the op's kernels found in its inputs; it takes those
  // from a failed op too, so that they never become the next op's.
  if (ctx.stream != nullptr) {
    try {
      gpu_->WaitAndRelease(gpu_->RecordCompletion(ctx));
    } catch (...) {
      if (!raised) raised = std::current_exception();
    }
  }
  if (stamp.op != 0) profiler_.RecordSpan(args.name, stamp, ProfilerClockNs());
  return raised;
}

void NaiveEngine::Push(SyncFn sync, AsyncFn async, const PushArgs& args) {
  RecursiveMutexLock lock(&mu_);
  WEFT_CHECK(!shut_down_) << "op '" << (args.name ? args.name : "op")
                          << "' pushed after the engine was shut down";
  CheckRoutable(args.device, args.prop, args.name);
  std::vector<NaiveVar*> reads, writes;
  for (VarHandle v : args.reads) reads.push_back(Checked(v, args.name));
  for (VarHandle v : args.writes) writes.push_back(Checked(v, args.name));
  std::shared_ptr<Failure> failure;
  for (const auto* list : {&reads, &writes}) {
    for (NaiveVar* v : *list) {
      if (!failure && v->LiveError()) failure = v->error_slot()->failure;
    }
  }
  if (!failure) {
    if (std::exception_ptr raised = Run(sync, async, args)) failure = failures_.Add(raised);
  }
  for (NaiveVar* v : writes) {
    if (failure) {
      v->SetError(failure);
    } else {
      v->ClearError();
    }
  }
}

void NaiveEngine::DeleteVariable(SyncFn deleter, Device device, VarHandle var) {
  RecursiveMutexLock lock(&mu_);
  NaiveVar* v = Checked(var, "DeleteVariable");
  CheckRoutable(device, FnProperty::kNormal, "DeleteVariable");
  v->MarkDeleted();  // before the deleter runs, as on the threaded engine
  std::exception_ptr raised =
      Run(deleter, nullptr, PushArgs{device, {}, {var}, FnProperty::kNormal, 0, "DeleteVariable"});
  vars_.Retire(v);
  if (raised) failures_.Add(raised);
}

void NaiveEngine::WaitForVar(VarHandle var) {
  std::shared_ptr<ErrorSlot> slot;
  {
    RecursiveMutexLock lock(&mu_);
    slot = Checked(var, "WaitForVar")->error_slot();
  }
  RethrowIfLive(slot);
}

void NaiveEngine::WaitForAll() { failures_.RethrowAndRetire(); }

void NaiveEngine::Shutdown() {
  RecursiveMutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (profiler_.running()) profiler_.StopOrReport(NamedStreams());  // before the streams go
  for (size_t d = 0; d < gpu_streams_.size(); ++d) {
    if (gpu_streams_[d] != nullptr) gpu_->DestroyStream(static_cast<int>(d), gpu_streams_[d]);
  }
  gpu_streams_.clear();
  failures_.ReportUnobserved();
}

// Every op's device work was done before its push returned: there is nothing to wait for.
void NaiveEngine::StopProfiling() {
  RecursiveMutexLock lock(&mu_);
  profiler_.Stop(NamedStreams());
}

std::vector<NamedStream> NaiveEngine::NamedStreams() const {
  std::vector<NamedStream> streams;
  for (size_t d = 0; d < gpu_streams_.size(); ++d) {
    if (gpu_streams_[d] == nullptr) continue;
    streams.push_back({gpu_streams_[d], Device::Gpu(static_cast<int>(d)).ToString() + " naive"});
  }
  return streams;
}

}  // namespace weft::engine
