// The state every engine keeps per variable: the error it holds, if any.
#pragma once

#include <memory>

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

 protected:
  explicit Var(const void* owner) : owner_(owner) {}
  ~Var() = default;

 private:
  const void* const owner_;
  std::shared_ptr<ErrorSlot> error_;
};

}  // namespace weft::engine
