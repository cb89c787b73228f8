#include "engine/internal/task_queue.h"

#include <chrono>
#include <thread>

#include "core/mutex.h"

namespace weft::engine {

void TaskQueue::Push(OprBlock* op, int priority) {
  if (priority != 0 || !ring_.TryPush(op)) {
    MutexLock lock(&mu_);
    if (priority == 0) {
      overflow_.push_back(op);
    } else {
      heap_.push(Entry{priority, seq_++, op});
      if (priority > 0) urgent_.fetch_add(1, std::memory_order_relaxed);
    }
    slow_size_.fetch_add(1, std::memory_order_relaxed);
  }
  size_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0 &&
      spinners_.load(std::memory_order_seq_cst) == 0) {
    WakeOne();
  }
}

void TaskQueue::WakeOne() {
  MutexLock lock(&sleep_mu_);  // a sleeper is either waiting or re-checking
  wake_.notify_one();
}

OprBlock* TaskQueue::TakeSlow() {
  MutexLock lock(&mu_);
  OprBlock* op = nullptr;
  if (!heap_.empty() && heap_.top().priority > 0) {
    op = heap_.top().op;
    heap_.pop();
    urgent_.fetch_sub(1, std::memory_order_relaxed);
  } else if ((op = ring_.TryPop()) != nullptr) {
    return op;
  } else if (!overflow_.empty()) {
    op = overflow_.front();
    overflow_.pop_front();
  } else if (!heap_.empty()) {
    op = heap_.top().op;
    heap_.pop();
  }
  if (op != nullptr) slow_size_.fetch_sub(1, std::memory_order_relaxed);
  return op;
}

OprBlock* TaskQueue::TryTake() {
  if (size_.load(std::memory_order_relaxed) <= 0) return nullptr;
  OprBlock* op = slow_size_.load(std::memory_order_relaxed) > 0 ? TakeSlow() : ring_.TryPop();
  if (op != nullptr) size_.fetch_sub(1, std::memory_order_relaxed);
  return op;
}

// A worker that just ran out of work is likely to get more within microseconds (the pusher is
// mid-loop); spinning a while (kSpin) avoids a sleep and a futex wake-up per op, which costs the
// pusher more than the op. It yields now and then: on a machine with as many workers as cores,
// the thread it waits for may need this core. After kIdleGrace it calls `on_idle` (once).
bool TaskQueue::SpinForWork(const std::function<void()>& on_idle, bool& idle_called) {
  // Claim a spinner's place; with none left, sleep at once. seq_cst: the pushers' Dekker pair
  // (size_, then sleepers_ and spinners_) must see this spinner or be seen by it.
  int spinning = spinners_.load(std::memory_order_seq_cst);
  do {
    if (spinning >= max_spinners_) return size_.load(std::memory_order_seq_cst) > 0;
  } while (!spinners_.compare_exchange_weak(spinning, spinning + 1, std::memory_order_seq_cst));
  const auto start = std::chrono::steady_clock::now();
  bool found = false;
  for (int i = 1; !found; ++i) {
    found = size_.load(std::memory_order_relaxed) > 0;
    if (i % 64 == 0 && !found) {
      const auto waited = std::chrono::steady_clock::now() - start;
      if (waited > kSpin) break;
      if (waited > kIdleGrace && !idle_called && on_idle) {
        idle_called = true;
        spinners_.fetch_sub(1, std::memory_order_seq_cst);  // pushes wake sleepers meanwhile
        on_idle();
        spinners_.fetch_add(1, std::memory_order_seq_cst);
      }
      std::this_thread::yield();
    }
  }
  spinners_.fetch_sub(1, std::memory_order_seq_cst);
  return found;
}

void TaskQueue::Sleep() {
  MutexLock lock(&sleep_mu_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  while (size_.load(std::memory_order_seq_cst) <= 0 && !closed_.load(std::memory_order_seq_cst)) {
    lock.Wait(wake_);
  }
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

OprBlock* TaskQueue::Pop(const std::function<void()>& on_idle) {
  bool idle_called = false;
  while (true) {
    if (OprBlock* op = TryTake()) {
      // More queued than this worker takes, and nobody spinning to take it: bring in another.
      if (size_.load(std::memory_order_seq_cst) > 0 &&
          sleepers_.load(std::memory_order_seq_cst) > 0 &&
          spinners_.load(std::memory_order_seq_cst) == 0) {
        WakeOne();
      }
      return op;
    }
    if (SpinForWork(on_idle, idle_called)) continue;
    if (!idle_called && on_idle) {
      idle_called = true;
      on_idle();
      continue;  // look again before sleeping: the hook took time
    }
    if (closed_.load(std::memory_order_seq_cst)) {
      if (OprBlock* op = TryTake()) return op;
      if (size_.load(std::memory_order_seq_cst) <= 0) return nullptr;
      continue;
    }
    Sleep();
  }
}

void TaskQueue::Close() {
  closed_.store(true, std::memory_order_seq_cst);
  MutexLock lock(&sleep_mu_);
  wake_.notify_all();
}

}  // namespace weft::engine
