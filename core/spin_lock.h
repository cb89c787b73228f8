// A test-and-test-and-set lock for critical sections of a few instructions (a var's queue, a
// memory pool's free list), where a mutex would put a briefly contended thread to sleep.
#pragma once

#include <atomic>
#include <thread>

namespace weft {

class SpinLock {
 public:
  void lock() {
    // Acquire pairs with unlock's release: the holder sees everything the last holder wrote.
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins > 64) std::this_thread::yield();  // the holder may have been preempted
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace weft
