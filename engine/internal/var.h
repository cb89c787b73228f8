// The state every engine keeps per variable (the error it holds, whether it was deleted), the
// check both engines run on every var an op names, and the registry that owns an engine's vars,
// live and deleted.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/spin_lock.h"
#include "engine/device_backend.h"
#include "engine/internal/failure_log.h"

namespace weft::engine {

// Base of each engine's variable type. `error_` is written only by an op that holds the var for
// writing and read only by ops ordered after that write, so the engine's dependency tracking is
// what protects it; the slot's own flags are atomics.
class Var {
 public:
  // The error this var holds, or null. Only for the op that currently holds the var.
  const ErrorSlot* LiveError() const { return error_ && error_->Live() ? error_.get() : nullptr; }
  const std::shared_ptr<ErrorSlot>& error_slot() const { return error_; }
  void SetError(const std::shared_ptr<Failure>& failure) {
    error_ = std::make_shared<ErrorSlot>(failure);
  }
  void ClearError() { error_.reset(); }
  // The engine that created this var; an op may only use vars of the engine it is pushed to.
  const void* owner() const { return owner_; }
  // Pending device work on this var (engine/device_backend.h); empty on a CPU-only build.
  VarSyncSlot& sync() { return sync_; }
  // Set when DeleteVariable is pushed on the var (before its deleter runs): nothing may be pushed
  // on it afterwards. Read without a lock by later pushes: a usage check only (a correct program
  // never pushes after the delete), so relaxed is enough.
  void MarkDeleted() { deleted_.store(true, std::memory_order_relaxed); }
  bool deleted() const { return deleted_.load(std::memory_order_relaxed); }
  // The stamp of the last op pushed that writes the var (engine.h's LastWritePushed).
  void NoteWritePushed(uint64_t stamp) { last_write_.store(stamp, std::memory_order_release); }
  uint64_t last_write() const { return last_write_.load(std::memory_order_acquire); }

 protected:
  explicit Var(const void* owner) : owner_(owner) {}
  ~Var() = default;

 private:
  friend class VarRegistry;
  const void* const owner_;
  std::shared_ptr<ErrorSlot> error_;
  VarSyncSlot sync_;
  std::atomic<bool> deleted_{false};
  std::atomic<uint64_t> last_write_{0};
  Var* registry_prev_ = nullptr;  // the engine's lists of vars; guarded by its VarRegistry
  Var* registry_next_ = nullptr;
};

[[noreturn]] void ThrowBadVar(const Var* v, const void* owner, const char* name);

// Throws weft::Error naming op `name` unless `v` is a var of the engine `owner` that
// DeleteVariable has not been pushed on. Both engines check every var of every op (and of
// WaitForVar and DeleteVariable) with it, so a misuse gives the same message on either. A
// deleted var is caught for as long as the engine keeps it as a tombstone (VarRegistry).
inline void CheckVar(const Var* v, const void* owner, const char* name) {
  if (v == nullptr || v->owner() != owner || v->deleted()) [[unlikely]]
    ThrowBadVar(v, owner, name);
}

// The vars of one engine: the live ones, so that the engine frees the vars users never deleted
// when it is destroyed, and the deleted ones, kept as tombstones rather than freed so that a push
// on a deleted var is caught (CheckVar) instead of reading freed memory. NewVariable reuses the
// oldest tombstone first, so an engine holds at most as many vars as were ever alive at once; a
// deleted handle is caught until its var is reused, after which it names the new var. Thread-safe;
// O(1) per call.
class VarRegistry {
 public:
  void Add(Var* v) {
    SpinLockHolder lock(&mu_);
    LinkLive(v);
  }
  // DeleteVariable's op on `v` has completed: `v` becomes a tombstone, still marked deleted, its
  // error dropped. Nothing of `v` but its owner and its deleted flag is read until it is reused.
  void Retire(Var* v) {
    v->ClearError();  // outside the lock: this may destroy the failure's exception
    SpinLockHolder lock(&mu_);
    UnlinkLive(v);
    v->registry_next_ = nullptr;
    if (tombstones_tail_ != nullptr) {
      tombstones_tail_->registry_next_ = v;
    } else {
      tombstones_head_ = v;
    }
    tombstones_tail_ = v;
    num_tombstones_.fetch_add(1, std::memory_order_relaxed);
  }
  // The oldest tombstone, live again (unmarked, no error, no device state), or null when there
  // is none: the caller then makes a var and Add()s it.
  Var* Revive() {
    // Relaxed: a stale zero only means a new var is made; the lock orders everything else.
    if (num_tombstones_.load(std::memory_order_relaxed) == 0) return nullptr;
    SpinLockHolder lock(&mu_);
    Var* v = tombstones_head_;
    if (v == nullptr) return nullptr;
    tombstones_head_ = v->registry_next_;
    if (tombstones_head_ == nullptr) tombstones_tail_ = nullptr;
    num_tombstones_.fetch_sub(1, std::memory_order_relaxed);
    LinkLive(v);
    v->deleted_.store(false, std::memory_order_relaxed);
    return v;
  }
  // Calls destroy(v) for every var, live or tombstone, and forgets them. Only once no op can run.
  template <typename Destroy>
  void DestroyAll(Destroy&& destroy) {
    SpinLockHolder lock(&mu_);
    for (Var** list : {&live_, &tombstones_head_}) {
      while (*list != nullptr) {
        Var* v = *list;
        *list = v->registry_next_;
        destroy(v);
      }
    }
    tombstones_tail_ = nullptr;
    num_tombstones_.store(0, std::memory_order_relaxed);
  }

 private:
  void LinkLive(Var* v) WEFT_REQUIRES(mu_) {
    v->registry_prev_ = nullptr;
    v->registry_next_ = live_;
    if (live_ != nullptr) live_->registry_prev_ = v;
    live_ = v;
  }
  void UnlinkLive(Var* v) WEFT_REQUIRES(mu_) {
    if (v->registry_prev_ != nullptr) {
      v->registry_prev_->registry_next_ = v->registry_next_;
    } else {
      live_ = v->registry_next_;
    }
    if (v->registry_next_ != nullptr) v->registry_next_->registry_prev_ = v->registry_prev_;
  }

  SpinLock mu_;
  Var* live_ WEFT_GUARDED_BY(mu_) = nullptr;             // doubly linked
  Var* tombstones_head_ WEFT_GUARDED_BY(mu_) = nullptr;  // singly linked, oldest first
  Var* tombstones_tail_ WEFT_GUARDED_BY(mu_) = nullptr;
  std::atomic<size_t> num_tombstones_{0};  // written under mu_
};

}  // namespace weft::engine
