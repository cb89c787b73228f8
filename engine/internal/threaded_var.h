// Dependency tracking for one variable: the queue of ops waiting to read or write it.
//
// State (all guarded by lock_):
//   running_reads_   reads granted and not yet completed
//   running_write_   a write granted and not yet completed
//   head_ .. tail_   accesses not yet granted, in push order
// Invariants: running_write_ implies running_reads_ == 0; a granted access is never in the
// queue; when the queue is non-empty and no write is running, its head is a write.
#pragma once

#include <mutex>

#include "core/object_pool.h"
#include "core/spin_lock.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/var.h"

namespace weft::engine {

class ThreadedVar : public Var {
 public:
  explicit ThreadedVar(const void* owner) : Var(owner) {}

  // An op is appended to all its vars at once, with every one of their locks held (taken in
  // address order), so that two threads pushing ops on overlapping vars queue them in the same
  // order on every var (else each could hold a var the other waits for).
  void lock() WEFT_ACQUIRE(lock_) { lock_.lock(); }
  void unlock() WEFT_RELEASE(lock_) { lock_.unlock(); }
  // With the lock held. Each returns true if the access is granted at once; otherwise the op is
  // queued and granted later through the `grant` callback of a Complete* call.
  bool AppendReadLocked(OprBlock* op) WEFT_REQUIRES(lock_);
  bool AppendWriteLocked(OprBlock* op) WEFT_REQUIRES(lock_);

  // Ends an access. For every op it unblocks, calls inherit(op, this) with the lock held, then
  // grant(op, this) outside it. So each unblocked op has taken the var's error before any access
  // pushed later can be granted: a WaitForVar pushed after a reader must not report the error,
  // and clear it, before that reader has carried it on.
  template <typename Inherit, typename Grant>
  void CompleteRead(Inherit&& inherit, Grant&& grant);
  template <typename Inherit, typename Grant>
  void CompleteWrite(Inherit&& inherit, Grant&& grant);

 private:
  struct Waiter {
    OprBlock* op;
    Waiter* next;
    bool write;
  };
  void Enqueue(OprBlock* op, bool write) WEFT_REQUIRES(lock_);

  SpinLock lock_;
  Waiter* head_ WEFT_GUARDED_BY(lock_) = nullptr;
  Waiter* tail_ WEFT_GUARDED_BY(lock_) = nullptr;
  int running_reads_ WEFT_GUARDED_BY(lock_) = 0;
  bool running_write_ WEFT_GUARDED_BY(lock_) = false;
};

template <typename Inherit, typename Grant>
void ThreadedVar::CompleteRead(Inherit&& inherit, Grant&& grant) {
  Waiter* next_write = nullptr;
  {
    SpinLockHolder lock(&lock_);
    if (--running_reads_ == 0 && head_ != nullptr) {  // head is a write (invariant)
      next_write = head_;
      head_ = head_->next;
      if (head_ == nullptr) tail_ = nullptr;
      running_write_ = true;
      inherit(next_write->op, this);
    }
  }
  if (next_write != nullptr) {
    OprBlock* op = next_write->op;
    ObjectPool<Waiter>::Delete(next_write);
    grant(op, this);
  }
}

template <typename Inherit, typename Grant>
void ThreadedVar::CompleteWrite(Inherit&& inherit, Grant&& grant) {
  Waiter* granted = nullptr;  // a detached list: one write, or the run of reads at the head
  {
    SpinLockHolder lock(&lock_);
    running_write_ = false;
    if (head_ != nullptr) {
      granted = head_;
      Waiter* last = head_;
      if (head_->write) {
        running_write_ = true;
      } else {
        running_reads_ = 1;
        while (last->next != nullptr && !last->next->write) {
          last = last->next;
          ++running_reads_;
        }
      }
      head_ = last->next;
      if (head_ == nullptr) tail_ = nullptr;
      last->next = nullptr;
      for (Waiter* w = granted; w != nullptr; w = w->next) inherit(w->op, this);
    }
  }
  while (granted != nullptr) {
    Waiter* next = granted->next;
    OprBlock* op = granted->op;
    ObjectPool<Waiter>::Delete(granted);
    grant(op, this);
    granted = next;
  }
}

}  // namespace weft::engine
