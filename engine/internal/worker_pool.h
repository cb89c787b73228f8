// A pool of CPU worker threads that run ready ops from one TaskQueue.
//
// When a worker's op completes and makes another op of the same pool ready, that op is kept in
// the worker's continuation slot and run next on the same thread instead of going through the
// queue (a chain of dependent ops costs no queue traffic or wake-ups). Only ops made ready by a
// completion (inside a FinishScope) go there: an op pushed from inside a running op's body must
// stay visible to idle workers. The slot is skipped while a positive-priority op is queued, and
// after kMaxContinuations in a row the worker goes back to the queue, so a long chain cannot
// starve queued work.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "engine/engine.h"
#include "engine/internal/task_queue.h"

namespace weft::engine {

class WorkerPool {
 public:
  // run(op, worker_id, stream) executes one op. Worker ids are first_worker_id .. + num_workers
  // - 1, unique within an engine (they index per-worker resources and profiler tracks). Threads
  // start on the first Submit.
  using Runner = std::function<void(OprBlock*, int, GpuStream*)>;
  // For a device's pool: each worker's stream (one per worker), and what a worker thread runs
  // before its first op (making its device current).
  struct DeviceSetup {
    std::vector<GpuStream*> streams;
    std::function<void()> bind_thread;
    // With the worker's stream, once its queue has stayed dry for TaskQueue::kIdleGrace.
    std::function<void(GpuStream*)> on_idle;
  };
  WorkerPool(std::string name, int num_workers, int first_worker_id, Runner run,
             DeviceSetup device = {});
  ~WorkerPool();  // Stop()s

  void Submit(OprBlock* op, int priority);
  // Lets the workers finish what is queued, then joins them. Idempotent.
  void Stop();

  const std::string& name() const { return name_; }
  int num_workers() const { return num_workers_; }
  int worker_id(int i) const { return first_worker_id_ + i; }

  // True when the calling thread is a worker of any pool (used to reject WaitForVar inside ops).
  static bool OnWorkerThread();

  // Marks the calling thread as completing an op: ops it makes ready may use its continuation
  // slot.
  class FinishScope {
   public:
    FinishScope();
    ~FinishScope();
    FinishScope(const FinishScope&) = delete;
    FinishScope& operator=(const FinishScope&) = delete;

   private:
    bool previous_;
  };
  // The worker id of the calling thread, or -1 for a thread that is not a worker.
  static int CurrentWorker();
  // The profiler track of the calling thread: its worker id, or for a thread that is not a worker
  // (ops with FnProperty::kAsync run on the thread that makes them ready) a track of its own
  // numbered from kFirstOtherTrack.
  static int CurrentTrack();
  static constexpr int kFirstOtherTrack = 100000;

 private:
  static constexpr int kMaxContinuations = 1024;
  static int MaxSpinners(int num_workers, const DeviceSetup& device);
  void Start();
  void WorkerLoop(int index);

  const std::string name_;
  const int num_workers_;
  const int first_worker_id_;
  const Runner run_;
  const DeviceSetup device_;
  TaskQueue queue_;
  std::once_flag started_;
  Mutex threads_mu_;
  std::vector<std::thread> threads_ WEFT_GUARDED_BY(threads_mu_);
};

}  // namespace weft::engine
