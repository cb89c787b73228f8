// Fixed-size objects for hot paths (the engine's op blocks and var queue entries, the imperative
// layer's call records) without a malloc per push: a malloc on the pushing thread freed on a
// worker thread makes both contend for the allocator's arena lock.
//
// Memory comes in aligned chunks of slots; each chunk's header holds a bitmap of its free slots.
// A thread keeps two things of its own: the objects it freed last (a LIFO list, reused first:
// they are in its cache), and a batch of free slots taken from the chunks in address order. Its
// older frees go back to their chunks' bitmaps, kBatch at a time, under a mutex, and a batch is
// taken, under the same mutex, by sweeping the chunks in order. So the order in which slots are
// handed to a thread does not depend on the order in which other threads freed them: a burst
// that frees objects in another order than it made them (1,000 chains of ops run chain by chain
// after being pushed layer by layer) leaves no scattered free list behind it, and a thread that
// allocates what another frees (the pusher and a worker) walks memory in order, which the
// hardware prefetches.
//
//   OprBlock* op = ObjectPool<OprBlock>::New();  ...  ObjectPool<OprBlock>::Delete(op);
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/no_destructor.h"

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
  static constexpr size_t kBatch = 256;  // slots moved to or from the chunks at once
  union Slot {
    Slot* next;
    alignas(T) unsigned char storage[sizeof(T)];
  };

  // A chunk: this header, then kSlots slots; aligned to its size, so a slot finds its chunk by
  // masking its address. The header is only touched under Shared::mu.
  static constexpr size_t kMaxSlots = 512;
  static constexpr size_t kWords = kMaxSlots / 64;
  struct Chunk {
    uint64_t free[kWords];  // bit i: slot i is free and in no thread's hands
    size_t num_free;
    size_t index;  // in Shared::chunks
  };
  static constexpr size_t kSlotsOffset =
      (sizeof(Chunk) + alignof(Slot) - 1) / alignof(Slot) * alignof(Slot);
  static constexpr size_t kChunkBytes = std::bit_ceil(kSlotsOffset + kBatch * sizeof(Slot));
  static constexpr size_t kSlots = std::min(kMaxSlots, (kChunkBytes - kSlotsOffset) / sizeof(Slot));
  static_assert(kSlots >= kBatch, "a new chunk fills a batch");
  static Slot* SlotOf(Chunk* chunk, size_t i) {
    return reinterpret_cast<Slot*>(reinterpret_cast<char*>(chunk) + kSlotsOffset) + i;
  }
  static Chunk* ChunkOf(Slot* s) {
    return reinterpret_cast<Chunk*>(reinterpret_cast<uintptr_t>(s) & ~(uintptr_t{kChunkBytes} - 1));
  }

  // Every chunk, and which of them have free slots. Never destroyed, so threads that exit after
  // static destruction can still return their objects.
  struct Shared {
    Mutex mu;
    std::vector<Chunk*> chunks WEFT_GUARDED_BY(mu);
    std::vector<uint64_t> has_free WEFT_GUARDED_BY(mu);  // bit c: chunks[c]->num_free > 0
    size_t total_free WEFT_GUARDED_BY(mu) = 0;
    size_t cursor WEFT_GUARDED_BY(mu) = 0;  // the chunk the next sweep starts at

    void Free(Slot* s) WEFT_REQUIRES(mu) {
      Chunk* chunk = ChunkOf(s);
      const size_t i = static_cast<size_t>(s - SlotOf(chunk, 0));
      chunk->free[i / 64] |= uint64_t{1} << (i % 64);
      if (chunk->num_free++ == 0) has_free[chunk->index / 64] |= uint64_t{1} << (chunk->index % 64);
      ++total_free;
    }
    // A chunk whose slots are all free; the next sweep starts at it.
    void AddChunk() WEFT_REQUIRES(mu) {
      auto* chunk = static_cast<Chunk*>(
          ::operator new(kChunkBytes, std::align_val_t(kChunkBytes)));  // never freed
      new (chunk) Chunk{};
      chunk->index = chunks.size();
      chunks.push_back(chunk);
      if (has_free.size() * 64 < chunks.size()) has_free.push_back(0);
      for (size_t i = 0; i < kSlots; ++i) Free(SlotOf(chunk, i));
      cursor = chunk->index;
    }
    // The first chunk at or after `from`, wrapping, with a free slot. Only while total_free > 0.
    size_t NextWithFree(size_t from) const WEFT_REQUIRES(mu) {
      size_t w = from / 64;
      uint64_t bits = has_free[w] & (~uint64_t{0} << (from % 64));
      while (bits == 0) {
        w = (w + 1) % has_free.size();
        bits = has_free[w];
      }
      return w * 64 + static_cast<size_t>(std::countr_zero(bits));
    }
    // Fills out[0..kBatch) with free slots, in address order within each chunk, the chunks in
    // sweep order. Adds a chunk when fewer than kBatch are free (those stay for a later sweep).
    void Take(Slot** out) {
      MutexLock lock(&mu);
      if (total_free < kBatch) AddChunk();
      size_t n = 0;
      while (n < kBatch) {
        cursor = NextWithFree(cursor);
        Chunk* chunk = chunks[cursor];
        for (size_t w = 0; w < kWords && n < kBatch; ++w) {
          for (; chunk->free[w] != 0 && n < kBatch; chunk->free[w] &= chunk->free[w] - 1) {
            out[n++] =
                SlotOf(chunk, w * 64 + static_cast<size_t>(std::countr_zero(chunk->free[w])));
            --chunk->num_free;
          }
        }
        if (chunk->num_free == 0) has_free[cursor / 64] &= ~(uint64_t{1} << (cursor % 64));
      }
      total_free -= n;
    }
  };
  static Shared& Global() {
    static NoDestructor<Shared> shared;  // chunks stay valid for thread_local destructors
    return *shared;
  }

  // Per-thread state; only its thread touches it. Trivially destructible, so it stays usable
  // while the thread exits (an engine destroyed at exit frees its vars on the main thread after
  // that thread's thread_local objects are gone).
  struct LocalList {
    Slot* freed;  // this thread's frees, newest first
    size_t num_freed;
    Slot* batch[kBatch];  // slots taken from the chunks, handed out in order
    size_t batch_next;
    size_t batch_size;

    void* Take() {
      if (Slot* slot = freed) {
        freed = slot->next;
        --num_freed;
        return slot;
      }
      if (batch_next == batch_size) {
        Global().Take(batch);
        batch_next = 0;
        batch_size = kBatch;
      }
      return batch[batch_next++];
    }
    void Give(T* object) {
      Slot* slot = reinterpret_cast<Slot*>(object);
      slot->next = freed;
      freed = slot;
      if (++num_freed >= 2 * kBatch) ReturnOlder(kBatch);
    }
    // Returns to the chunks all but this thread's `keep` newest frees.
    void ReturnOlder(size_t keep) {
      Slot* last_kept = nullptr;
      Slot* rest = freed;
      for (size_t n = 0; n < keep && rest != nullptr; ++n) last_kept = rest, rest = rest->next;
      if (last_kept == nullptr) {
        freed = nullptr;
      } else {
        last_kept->next = nullptr;
      }
      num_freed = keep < num_freed ? keep : num_freed;
      Slot* older[kBatch];
      while (rest != nullptr) {
        size_t n = 0;
        for (; n < kBatch && rest != nullptr; rest = rest->next) older[n++] = rest;
        Return(older, n);
      }
    }
    static void Return(Slot* const* slots, size_t n) {
      Shared& g = Global();
      MutexLock lock(&g.mu);
      for (size_t i = 0; i < n; ++i) g.Free(slots[i]);
    }
  };
  // Hands a thread's slots back to the chunks when the thread exits.
  struct Flusher {
    LocalList* list;
    ~Flusher() {
      list->ReturnOlder(0);
      LocalList::Return(list->batch + list->batch_next, list->batch_size - list->batch_next);
      list->batch_next = list->batch_size = 0;
    }
  };
  static LocalList& Local() {
    thread_local LocalList local{};
    thread_local Flusher flusher{&local};
    (void)flusher;
    return local;
  }
};

}  // namespace weft
