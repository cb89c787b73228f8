#include "engine/internal/failure_log.h"

#include <cstdio>
#include <string>

#include "core/mutex.h"

namespace weft::engine {

void RethrowIfLive(const std::shared_ptr<ErrorSlot>& slot) {
  if (!slot || !slot->Live()) return;
  if (slot->cleared.exchange(true, std::memory_order_acq_rel))
    return;  // another waiter reported it
  slot->failure->reported.store(true, std::memory_order_relaxed);
  std::rethrow_exception(slot->failure->error);
}

std::shared_ptr<Failure> FailureLog::Add(std::exception_ptr error) {
  auto failure = std::make_shared<Failure>(std::move(error));
  MutexLock lock(&mu_);
  failures_.push_back(failure);
  return failure;
}

size_t FailureLog::Retire(std::exception_ptr* first_unreported) {
  std::vector<std::shared_ptr<Failure>> failures;
  {
    MutexLock lock(&mu_);
    failures.swap(failures_);
  }
  size_t unreported = 0;
  for (const auto& f : failures) {
    f->retired.store(true, std::memory_order_release);
    if (f->reported.load(std::memory_order_relaxed)) continue;
    if (unreported++ == 0 && first_unreported) *first_unreported = f->error;
  }
  return unreported;
}

void FailureLog::ReportUnobserved() {
  std::exception_ptr first;
  size_t count = Retire(&first);
  if (count == 0) return;
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(first);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  std::fprintf(stderr, "weft: %zu failed op(s) were never waited for; the first: %s\n", count,
               what.c_str());
}

void FailureLog::RethrowAndRetire() {
  std::exception_ptr first;
  if (Retire(&first) > 0) std::rethrow_exception(first);
}

}  // namespace weft::engine
