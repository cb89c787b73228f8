// Mutex and MutexLock: std::mutex with clang's thread-safety attributes
// (core/thread_annotations.h), which libstdc++'s std::mutex lacks, so that WEFT_GUARDED_BY(mu_) and
// WEFT_REQUIRES(mu_) are checked by -Wthread-safety.
//
//   Mutex mu_;
//   int count_ WEFT_GUARDED_BY(mu_);
//   void Add() { MutexLock lock(&mu_); ++count_; }
//
// Condition variables: a std::condition_variable waits on a std::unique_lock<std::mutex>, so wait
// through MutexLock::Wait (it relocks before it returns, and the analysis sees the lock held all
// along), or, where a unique_lock must be handed over, on mu.native() with the function marked
// WEFT_NO_THREAD_SAFETY_ANALYSIS and a comment saying so.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "core/thread_annotations.h"

namespace weft {

class WEFT_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() WEFT_ACQUIRE() { mu_.lock(); }
  void unlock() WEFT_RELEASE() { mu_.unlock(); }
  bool try_lock() WEFT_TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis that the caller holds this mutex (a function whose contract is to run with
  // it held, where the mutex is not reachable from its declaration). Checks nothing at run time.
  void AssertHeld() const WEFT_ASSERT_CAPABILITY(this) {}
  // For code the analysis cannot follow (a std::unique_lock handed to another function).
  std::mutex& native() WEFT_RETURN_CAPABILITY(this) { return mu_; }

 private:
  std::mutex mu_;
};

// Holds `mu` for its scope, and waits on condition variables with it held.
class WEFT_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) WEFT_ACQUIRE(mu) : lock_(mu->native()) {}
  // Takes over `mu`, which this thread locked itself (a lock()/try_lock() taken on some paths
  // only, before the scope that needs it on all of them).
  MutexLock(Mutex* mu, std::adopt_lock_t) WEFT_REQUIRES(mu)
      : lock_(mu->native(), std::adopt_lock) {}
  ~MutexLock() WEFT_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // cv.wait(lock): `mu` is released while waiting and held again when it returns.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  // cv.wait(lock, pred), likewise. A predicate that reads what `mu` guards says so:
  // [&]() WEFT_REQUIRES(mu_) { return done_; }.
  template <typename Predicate>
  void Wait(std::condition_variable& cv, Predicate pred) {
    cv.wait(lock_, std::move(pred));
  }
  // As Wait, for at most `limit`; returns pred() (false: timed out).
  template <typename Rep, typename Period, typename Predicate>
  bool WaitFor(std::condition_variable& cv, std::chrono::duration<Rep, Period> limit,
               Predicate pred) {
    return cv.wait_for(lock_, limit, std::move(pred));
  }
  // Releases and retakes `mu` inside the scope (for a call that must not hold it).
  void Unlock() WEFT_RELEASE() { lock_.unlock(); }
  void Lock() WEFT_ACQUIRE() { lock_.lock(); }

 private:
  std::unique_lock<std::mutex> lock_;
};

// A mutex its holder may lock again: the naive engine's, since an op it runs may push another
// op. The analysis does not count re-locks; the scope it sees is the outermost one.
class WEFT_CAPABILITY("mutex") RecursiveMutex {
 public:
  RecursiveMutex() = default;
  RecursiveMutex(const RecursiveMutex&) = delete;
  RecursiveMutex& operator=(const RecursiveMutex&) = delete;

  void lock() WEFT_ACQUIRE() { mu_.lock(); }
  void unlock() WEFT_RELEASE() { mu_.unlock(); }

 private:
  std::recursive_mutex mu_;
};

class WEFT_SCOPED_CAPABILITY RecursiveMutexLock {
 public:
  explicit RecursiveMutexLock(RecursiveMutex* mu) WEFT_ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~RecursiveMutexLock() WEFT_RELEASE() { mu_->unlock(); }
  RecursiveMutexLock(const RecursiveMutexLock&) = delete;
  RecursiveMutexLock& operator=(const RecursiveMutexLock&) = delete;

 private:
  RecursiveMutex* const mu_;
};

}  // namespace weft
