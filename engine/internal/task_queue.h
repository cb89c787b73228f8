// The queue of ready ops of one worker pool.
//
// Priority 0 (nearly everything) goes to a lock-free FIFO ring; when the ring is full, to an
// overflow list. Other priorities go to a heap, higher first, FIFO among equals. Pop prefers a
// positive-priority op, then priority 0, then negative priorities. (Order among priority-0 ops
// is FIFO except across an overflow; dependencies never rely on it, the vars enforce them.)
//
// Idle workers spin briefly, then sleep on a condition variable; a push wakes one only when
// someone sleeps and no one spins, so a busy pool pays no wake-up per op. At most
// `max_spinners` spin at once (the rest sleep at once): a spinner shares the machine with the
// threads that push (and with oneDNN's threads in the op a worker runs), and on a machine with as
// many workers as cores, spinners beyond cores - 1 only take cycles from the thread that pushes
// the work they wait for. A worker that has found no work for
// kIdleGrace (or is about to sleep) calls its idle hook once: a GPU worker launches the kernels
// it batched then, not between two ops of a stream that is still coming.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <queue>

#include "core/mutex.h"
#include "engine/internal/mpmc_ring.h"

namespace weft::engine {

struct OprBlock;

class TaskQueue {
 public:
  explicit TaskQueue(int max_spinners = 1)
      : max_spinners_(max_spinners < 1 ? 1 : max_spinners), ring_(kRingCapacity) {}
  void Push(OprBlock* op, int priority);
  // Blocks until an op is available; returns null once the queue is closed and empty. `on_idle`
  // (may be empty) runs at most once per call, when no op came for kIdleGrace or before sleeping.
  OprBlock* Pop(const std::function<void()>& on_idle = {});
  // Wakes every waiting Pop; ops still queued are handed out before Pop returns null.
  void Close();
  // True while an op of positive priority is queued (a hint: relaxed).
  bool HasUrgent() const { return urgent_.load(std::memory_order_relaxed) > 0; }

 private:
  static constexpr size_t kRingCapacity = 8192;
  static constexpr std::chrono::microseconds kSpin{50};
  static constexpr std::chrono::microseconds kIdleGrace{10};
  struct Entry {
    int priority;
    uint64_t seq;
    OprBlock* op;
    bool operator<(const Entry& o) const {  // max-heap: higher priority, then earlier push
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };
  OprBlock* TryTake();
  OprBlock* TakeSlow();
  bool SpinForWork(const std::function<void()>& on_idle, bool& idle_called);
  void Sleep();
  void WakeOne();

  const int max_spinners_;
  MpmcRing<OprBlock> ring_;
  Mutex mu_;
  std::deque<OprBlock*> overflow_ WEFT_GUARDED_BY(mu_);   // priority-0 ops that found the ring full
  std::priority_queue<Entry> heap_ WEFT_GUARDED_BY(mu_);  // non-zero priorities
  uint64_t seq_ WEFT_GUARDED_BY(mu_) = 0;
  // Ops in overflow_ and heap_, readable without mu_ so Pop skips the lock when there are none.
  std::atomic<int64_t> slow_size_{0};
  std::atomic<int64_t> urgent_{0};  // queued ops of positive priority

  // Queued ops, and Pops asleep. A Dekker pair (seq_cst both sides): a pusher that adds an op
  // then sees no sleeper knows any Pop about to sleep will see the op first.
  alignas(64) std::atomic<int64_t> size_{0};
  alignas(64) std::atomic<int> sleepers_{0};
  std::atomic<int> spinners_{0};
  std::atomic<bool> closed_{false};
  Mutex sleep_mu_;  // only for sleeping and waking
  std::condition_variable wake_;
};

}  // namespace weft::engine
