#include "engine/internal/task_queue.h"

#include <thread>

namespace weft::engine {

void TaskQueue::Push(OprBlock* op, int priority) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (priority == 0) {
      fifo_.push_back(op);
    } else {
      heap_.push(Entry{priority, seq_++, op});
    }
    size_.fetch_add(1, std::memory_order_relaxed);
    wake = sleepers_ > 0;
  }
  if (wake) cv_.notify_one();
}

OprBlock* TaskQueue::TakeLocked() {
  OprBlock* op = nullptr;
  if (!heap_.empty() && (heap_.top().priority > 0 || fifo_.empty())) {
    op = heap_.top().op;
    heap_.pop();
  } else if (!fifo_.empty()) {
    op = fifo_.front();
    fifo_.pop_front();
  }
  if (op != nullptr) size_.fetch_sub(1, std::memory_order_relaxed);
  return op;
}

// A worker that just ran out of work is likely to get more within microseconds (the pusher is
// mid-loop); spinning a little avoids a futex sleep and wake per op.
bool TaskQueue::SpinForWork() {
  for (int i = 0; i < 2000; ++i) {
    if (size_.load(std::memory_order_relaxed) > 0) return true;
    if ((i & 63) == 63) std::this_thread::yield();
  }
  return false;
}

OprBlock* TaskQueue::Pop() {
  SpinForWork();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (OprBlock* op = TakeLocked()) return op;
    if (closed_) return nullptr;
    ++sleepers_;
    cv_.wait(lock);
    --sleepers_;
  }
}

void TaskQueue::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

}  // namespace weft::engine
