// A bounded lock-free multi-producer multi-consumer FIFO of pointers (Dmitry Vyukov's design):
// each cell carries a sequence number that says whether it is ready to be written or read at a
// given position, so producers and consumers only contend on one CAS each, never on a lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>

namespace weft::engine {

template <typename T>
class MpmcRing {
 public:
  explicit MpmcRing(size_t capacity_pow2)
      : mask_(capacity_pow2 - 1), cells_(new Cell[capacity_pow2]) {
    static_assert(sizeof(size_t) == 8, "positions must not wrap");
    if (capacity_pow2 < 2 || (capacity_pow2 & mask_) != 0)
      std::abort();  // a power of two, by construction
    for (size_t i = 0; i < capacity_pow2; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  // False when full.
  bool TryPush(T* value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    while (true) {
      Cell& cell = cells_[pos & mask_];
      // Acquire pairs with the consumer's release: the cell's last value has been read.
      const size_t seq = cell.seq.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = value;
          cell.seq.store(pos + 1, std::memory_order_release);  // publishes `value` to the reader
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  // Null when empty.
  T* TryPop() {
    size_t pos = head_.load(std::memory_order_relaxed);
    while (true) {
      Cell& cell = cells_[pos & mask_];
      const size_t seq = cell.seq.load(std::memory_order_acquire);  // pairs with TryPush's release
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          T* value = cell.value;
          cell.seq.store(pos + mask_ + 1, std::memory_order_release);  // free for the next lap
          return value;
        }
      } else if (diff < 0) {
        return nullptr;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

 private:
  struct alignas(16) Cell {
    std::atomic<size_t> seq;
    T* value;
  };
  const size_t mask_;
  const std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<size_t> tail_{0};  // next position to write
  alignas(64) std::atomic<size_t> head_{0};  // next position to read
};

}  // namespace weft::engine
