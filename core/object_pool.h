// Fixed-size objects for hot paths (the engine's op blocks and var queue entries, the imperative
// layer's call records) without a malloc per push: a malloc on the pushing thread freed on a
// worker thread makes both contend for the allocator's arena lock. Each thread keeps a small
// free list; full batches move to and from a shared list under a mutex, so objects freed on
// worker threads return to the pushing thread in bulk.
//
//   OprBlock* op = ObjectPool<OprBlock>::New();  ...  ObjectPool<OprBlock>::Delete(op);
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace weft {

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

  // Per-thread free list; only its thread touches it. Trivially destructible, so it stays usable
  // while the thread exits (an engine destroyed at exit frees its vars on the main thread after
  // that thread's thread_local objects are gone).
  struct LocalList {
    Slot* head;
    size_t count;

    void* Take() {
      if (head == nullptr) Refill();
      Slot* slot = head;
      head = slot->next;
      --count;
      return slot;
    }
    void Give(T* object) {
      Slot* slot = reinterpret_cast<Slot*>(object);
      slot->next = head;
      head = slot;
      if (++count >= 2 * kBatch) PutBatch();
    }
    void Refill() {
      Shared& g = Global();
      std::lock_guard<std::mutex> lock(g.mu);
      if (!g.batches.empty()) {
        head = g.batches.back().first;
        count = g.batches.back().second;
        g.batches.pop_back();
        return;
      }
      g.chunks.push_back(std::make_unique<Slot[]>(kBatch));
      Slot* chunk = g.chunks.back().get();
      for (size_t i = 0; i + 1 < kBatch; ++i) chunk[i].next = &chunk[i + 1];
      chunk[kBatch - 1].next = nullptr;
      head = chunk;
      count = kBatch;
    }
    // Moves up to kBatch slots from the front of the list to the shared list.
    void PutBatch() {
      Slot* first = head;
      Slot* last = head;
      size_t n = 1;
      for (; n < kBatch && last->next != nullptr; ++n) last = last->next;
      head = last->next;
      last->next = nullptr;
      count -= n;
      Shared& g = Global();
      std::lock_guard<std::mutex> lock(g.mu);
      g.batches.emplace_back(first, n);
    }
  };
  // Hands a thread's free slots back to the shared list when the thread exits.
  struct Flusher {
    LocalList* list;
    ~Flusher() {
      while (list->head != nullptr) list->PutBatch();
    }
  };
  static LocalList& Local() {
    thread_local LocalList local{nullptr, 0};
    thread_local Flusher flusher{&local};
    (void)flusher;
    return local;
  }
};

}  // namespace weft
