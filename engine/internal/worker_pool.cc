#include "engine/internal/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/env.h"
#include "core/mutex.h"

namespace weft::engine {

namespace {

// What the calling thread is, if it is a worker. Set once when the worker starts.
struct WorkerIdentity {
  const WorkerPool* pool = nullptr;
  int worker = -1;
  OprBlock* continuation = nullptr;  // the next op this worker runs, bypassing the queue
  bool finishing = false;            // inside a FinishScope
};
thread_local WorkerIdentity tls_worker;

}  // namespace

WorkerPool::WorkerPool(std::string name, int num_workers, int first_worker_id, Runner run,
                       DeviceSetup device)
    : name_(std::move(name)),
      num_workers_(num_workers),
      first_worker_id_(first_worker_id),
      run_(std::move(run)),
      device_(std::move(device)),
      queue_(MaxSpinners(num_workers, device_)) {}

// A CPU pool leaves one core to the threads that push (and to the OpenMP threads of the op that
// a worker runs); a device pool's workers wait on the GPU, not on cores, and may all spin.
int WorkerPool::MaxSpinners(int num_workers, const DeviceSetup& device) {
  if (!device.streams.empty()) return num_workers;
  return std::max(1, std::min(num_workers, NumCores() - 1));
}

WorkerPool::~WorkerPool() { Stop(); }

bool WorkerPool::OnWorkerThread() { return tls_worker.pool != nullptr; }
int WorkerPool::CurrentWorker() { return tls_worker.worker; }

int WorkerPool::CurrentTrack() {
  if (tls_worker.worker >= 0) return tls_worker.worker;
  static std::atomic<int> next_other_track{kFirstOtherTrack};
  thread_local int other_track = next_other_track.fetch_add(1, std::memory_order_relaxed);
  return other_track;
}

WorkerPool::FinishScope::FinishScope() : previous_(tls_worker.finishing) {
  tls_worker.finishing = true;
}
WorkerPool::FinishScope::~FinishScope() { tls_worker.finishing = previous_; }

void WorkerPool::Submit(OprBlock* op, int priority) {
  if (tls_worker.pool == this && tls_worker.finishing && tls_worker.continuation == nullptr &&
      priority == 0 && !queue_.HasUrgent()) {
    tls_worker.continuation = op;
    return;
  }
  std::call_once(started_, [this] { Start(); });
  queue_.Push(op, priority);
}

void WorkerPool::Start() {
  MutexLock lock(&threads_mu_);
  for (int i = 0; i < num_workers_; ++i) threads_.emplace_back([this, i] { WorkerLoop(i); });
}

void WorkerPool::WorkerLoop(int index) {
  const int worker = worker_id(index);
  GpuStream* const stream = device_.streams.empty() ? nullptr : device_.streams[index];
  if (device_.bind_thread) {
    try {
      device_.bind_thread();
    } catch (...) {
      // The device could be bound at push (the streams were made there); a failure now shows up
      // as the ops' own errors.
    }
  }
  tls_worker.pool = this;
  tls_worker.worker = worker;
  std::function<void()> idle;
  if (device_.on_idle) idle = [this, stream] { device_.on_idle(stream); };
  while (OprBlock* op = queue_.Pop(idle)) {
    for (int chained = 0; op != nullptr; ++chained) {
      run_(op, worker, stream);
      op = std::exchange(tls_worker.continuation, nullptr);
      if (op != nullptr && chained >= kMaxContinuations) {
        queue_.Push(op, 0);
        op = nullptr;
      }
    }
  }
  tls_worker.pool = nullptr;
  tls_worker.worker = -1;
}

void WorkerPool::Stop() {
  queue_.Close();
  std::vector<std::thread> threads;
  {
    MutexLock lock(&threads_mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) {
    // A worker that stops its own pool (exit() inside an op) cannot join itself.
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();
    } else {
      t.join();
    }
  }
}

}  // namespace weft::engine
