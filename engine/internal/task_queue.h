// The queue of ready ops of one worker pool. Priority 0 (nearly everything) is a plain FIFO;
// other priorities go to a heap, higher first, FIFO among equals. Pop prefers a positive-priority
// op, then the FIFO, then negative priorities.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <queue>
#include <vector>

namespace weft::engine {

struct OprBlock;

class TaskQueue {
 public:
  void Push(OprBlock* op, int priority);
  // Blocks until an op is available; returns null once the queue is closed and empty.
  OprBlock* Pop();
  // Wakes every waiting Pop; ops still queued are handed out before Pop returns null.
  void Close();

 private:
  struct Entry {
    int priority;
    uint64_t seq;
    OprBlock* op;
    bool operator<(const Entry& o) const {  // max-heap: higher priority, then earlier push
      return priority != o.priority ? priority < o.priority : seq > o.seq;
    }
  };
  OprBlock* TakeLocked();
  bool SpinForWork();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<OprBlock*> fifo_;           // guarded by mu_
  std::priority_queue<Entry> heap_;      // guarded by mu_
  uint64_t seq_ = 0;                     // guarded by mu_
  int sleepers_ = 0;                     // Pops blocked on cv_; guarded by mu_
  bool closed_ = false;                  // guarded by mu_
  // Number of queued ops, readable without the lock so idle workers can spin on it briefly
  // before sleeping. Only a hint (relaxed): the decision to sleep is re-made under mu_.
  std::atomic<int64_t> size_{0};
};

}  // namespace weft::engine
