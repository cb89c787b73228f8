#include "engine/internal/threaded_var.h"

#include <mutex>

namespace weft::engine {

void ThreadedVar::Enqueue(OprBlock* op, bool write) {
  Waiter* waiter = ObjectPool<Waiter>::New(Waiter{op, nullptr, write});
  if (tail_ == nullptr) {
    head_ = tail_ = waiter;
  } else {
    tail_->next = waiter;
    tail_ = waiter;
  }
}

bool ThreadedVar::AppendReadLocked(OprBlock* op) {
  if (!running_write_ && head_ == nullptr) {
    ++running_reads_;
    return true;
  }
  Enqueue(op, /*write=*/false);
  return false;
}

bool ThreadedVar::AppendWriteLocked(OprBlock* op) {
  if (!running_write_ && running_reads_ == 0 && head_ == nullptr) {
    running_write_ = true;
    return true;
  }
  Enqueue(op, /*write=*/true);
  return false;
}

}  // namespace weft::engine
