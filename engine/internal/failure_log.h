// How an op's error travels: a Failure is created once, when an op fails; every var the failure
// reaches (the op's writes, then the writes of each op skipped because of it) gets an ErrorSlot
// of its own pointing at it. WaitForVar reports a slot once and clears it; WaitForAll reports the
// first failure nobody has seen and retires them all.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "core/mutex.h"

namespace weft::engine {

struct Failure : std::enable_shared_from_this<Failure> {
  explicit Failure(std::exception_ptr e) : error(std::move(e)) {}
  const std::exception_ptr error;
  // Set by WaitForVar when it rethrows this failure; WaitForAll then does not rethrow it again.
  // Relaxed is enough: it only selects which error WaitForAll reports, after its own barrier.
  std::atomic<bool> reported{false};
  // Set by WaitForAll: every slot of this failure is dead. Release/acquire so that an op that
  // sees it retired also sees everything WaitForAll did before.
  std::atomic<bool> retired{false};
};

struct ErrorSlot {
  explicit ErrorSlot(std::shared_ptr<Failure> f) : failure(std::move(f)) {}
  bool Live() const {
    return !cleared.load(std::memory_order_acquire) &&
           !failure->retired.load(std::memory_order_acquire);
  }
  const std::shared_ptr<Failure> failure;
  std::atomic<bool> cleared{false};  // set by the WaitForVar that reported this slot
};

// Rethrows the slot's error and clears the slot, if it is live.
void RethrowIfLive(const std::shared_ptr<ErrorSlot>& slot);

// The failures since the last WaitForAll. Thread-safe.
class FailureLog {
 public:
  std::shared_ptr<Failure> Add(std::exception_ptr error);
  // Retires every failure; rethrows the first one not yet reported.
  void RethrowAndRetire();
  // Retires every failure; returns how many were never reported.
  size_t Retire(std::exception_ptr* first_unreported);
  // At shutdown: retires every failure and says on stderr how many nobody waited for.
  void ReportUnobserved();

 private:
  Mutex mu_;
  std::vector<std::shared_ptr<Failure>> failures_ WEFT_GUARDED_BY(mu_);
};

}  // namespace weft::engine
