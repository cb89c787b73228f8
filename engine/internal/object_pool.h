// Fixed-size objects for the engine's hot path (op blocks, queue entries) without a malloc per
// push. Each thread keeps a small free list; full batches move to and from a shared list under a
// mutex, so objects freed on worker threads return to the pushing thread in bulk.
//
//   OprBlock* op = ObjectPool<OprBlock>::New();  ...  ObjectPool<OprBlock>::Delete(op);
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace weft::engine {

template <typename T>
class ObjectPool {
 public:
  template <typename... Args>
  static T* New(Args&&... args) {
    return new (Local().Take()) T(std::forward<Args>(args)...);
  }
  static void Delete(T* object) {
    object->~T();
    Local().Give(object);
  }

 private:
  static constexpr size_t kBatch = 256;  // objects moved to or from the shared list at once
  union Slot {
    Slot* next;
    alignas(T) unsigned char storage[sizeof(T)];
  };

  // The shared list of full batches and the memory behind every slot. Never destroyed, so
  // threads that exit after static destruction can still return their objects.
  struct Shared {
    std::mutex mu;
    std::vector<std::pair<Slot*, size_t>> batches;  // (list, its length); guarded by mu
    std::vector<std::unique_ptr<Slot[]>> chunks;    // guarded by mu
  };
  static Shared& Global() {
    static Shared* shared = new Shared;
    return *shared;
  }

  // Per-thread free list; only its thread touches it.
  class LocalList {
   public:
    ~LocalList() {  // hand everything back so other threads can reuse it
      while (head_ != nullptr) PutBatch();
    }
    void* Take() {
      if (head_ == nullptr) Refill();
      Slot* slot = head_;
      head_ = slot->next;
      --count_;
      return slot;
    }
    void Give(T* object) {
      Slot* slot = reinterpret_cast<Slot*>(object);
      slot->next = head_;
      head_ = slot;
      if (++count_ >= 2 * kBatch) PutBatch();
    }

   private:
    void Refill() {
      Shared& g = Global();
      std::lock_guard<std::mutex> lock(g.mu);
      if (!g.batches.empty()) {
        head_ = g.batches.back().first;
        count_ = g.batches.back().second;
        g.batches.pop_back();
        return;
      }
      {
        g.chunks.push_back(std::make_unique<Slot[]>(kBatch));
        Slot* chunk = g.chunks.back().get();
        for (size_t i = 0; i + 1 < kBatch; ++i) chunk[i].next = &chunk[i + 1];
        chunk[kBatch - 1].next = nullptr;
        head_ = chunk;
        count_ = kBatch;
      }
    }
    // Moves up to kBatch slots from the front of the local list to the shared list.
    void PutBatch() {
      Slot* first = head_;
      Slot* last = head_;
      size_t n = 1;
      for (; n < kBatch && last->next != nullptr; ++n) last = last->next;
      head_ = last->next;
      last->next = nullptr;
      count_ -= n;
      Shared& g = Global();
      std::lock_guard<std::mutex> lock(g.mu);
      g.batches.emplace_back(first, n);
    }

    Slot* head_ = nullptr;
    size_t count_ = 0;
  };
  static LocalList& Local() {
    thread_local LocalList local;
    return local;
  }
};

}  // namespace weft::engine
