// The state every engine keeps per variable: the error it holds, if any.
#pragma once

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
  void SetError(const std::shared_ptr<Failure>& failure) { error_ = std::make_shared<ErrorSlot>(failure); }
  void ClearError() { error_.reset(); }
  // The engine that created this var; an op may only use vars of the engine it is pushed to.
  const void* owner() const { return owner_; }
  // Pending device work on this var (engine/device_backend.h); empty on a CPU-only build.
  VarSyncSlot& sync() { return sync_; }

 protected:
  explicit Var(const void* owner) : owner_(owner) {}
  ~Var() = default;

 private:
  friend class VarRegistry;
  const void* const owner_;
  std::shared_ptr<ErrorSlot> error_;
  VarSyncSlot sync_;
  Var* registry_prev_ = nullptr;  // the engine's list of live vars; guarded by its VarRegistry
  Var* registry_next_ = nullptr;
};

// The live vars of one engine, so that the engine frees the vars users never deleted when it is
// destroyed. Thread-safe; O(1) per var.
class VarRegistry {
 public:
  void Add(Var* v) {
    std::lock_guard<SpinLock> lock(mu_);
    v->registry_next_ = first_;
    if (first_ != nullptr) first_->registry_prev_ = v;
    first_ = v;
  }
  void Remove(Var* v) {
    std::lock_guard<SpinLock> lock(mu_);
    if (v->registry_prev_ != nullptr) {
      v->registry_prev_->registry_next_ = v->registry_next_;
    } else {
      first_ = v->registry_next_;
    }
    if (v->registry_next_ != nullptr) v->registry_next_->registry_prev_ = v->registry_prev_;
  }
  // Calls destroy(v) for every var still registered, and forgets them. Only once no op can run.
  template <typename Destroy>
  void DestroyAll(Destroy&& destroy) {
    std::lock_guard<SpinLock> lock(mu_);
    while (first_ != nullptr) {
      Var* v = first_;
      first_ = v->registry_next_;
      destroy(v);
    }
  }

 private:
  SpinLock mu_;
  Var* first_ = nullptr;  // guarded by mu_
};

}  // namespace weft::engine
