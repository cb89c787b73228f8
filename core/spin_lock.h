// A test-and-test-and-set lock for critical sections of a few instructions (a var's queue, a
// memory pool's free list), where a mutex would put a briefly contended thread to sleep. A
// capability for clang's thread-safety analysis (core/thread_annotations.h): hold it with a
// SpinLockHolder, and mark what it guards WEFT_GUARDED_BY.
#pragma once

#include <atomic>
#include <thread>

#include "core/thread_annotations.h"

namespace weft {

class WEFT_CAPABILITY("spin lock") SpinLock {
 public:
  void lock() WEFT_ACQUIRE() {
    // Acquire pairs with unlock's release: the holder sees everything the last holder wrote.
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins > 64) std::this_thread::yield();  // the holder may have been preempted
      }
    }
  }
  void unlock() WEFT_RELEASE() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Holds a SpinLock for its scope (std::lock_guard, which the analysis does not know).
class WEFT_SCOPED_CAPABILITY SpinLockHolder {
 public:
  explicit SpinLockHolder(SpinLock* lock) WEFT_ACQUIRE(lock) : lock_(lock) { lock_->lock(); }
  ~SpinLockHolder() WEFT_RELEASE() { lock_->unlock(); }
  SpinLockHolder(const SpinLockHolder&) = delete;
  SpinLockHolder& operator=(const SpinLockHolder&) = delete;

 private:
  SpinLock* const lock_;
};

}  // namespace weft
