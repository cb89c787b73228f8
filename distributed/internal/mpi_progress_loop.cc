// MpiProgress, the thread's loop and the collectives' progress: waiting for work, passes of rounds
// (start what may start, test what runs) and what to do between passes (idle_policy.h), and the
// waiters' help. Set-up, hand-over and completion are mpi_progress.cc.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "distributed/internal/idle_policy.h"
#include "distributed/internal/mpi_check.h"
#include "distributed/internal/mpi_progress.h"

namespace weft::dist::internal {

namespace {
// Set while a helping waiter holds driver_: a completion it makes may run an engine op inline,
// which may wait (and help) again; it must not lock driver_ a second time.
thread_local bool tls_driving = false;
struct Driving {
  Driving() { tls_driving = true; }
  ~Driving() { tls_driving = false; }
};
}  // namespace

// The thread: sleeps while nothing is handed over and nothing runs; while collectives run, polls
// them in passes (RunPass) and between passes does what the idle policy decides: at once while
// busy, yielding the core while patient, with naps once a peer is late (idle_policy.h).
//
// One thread drives a collective: while this one polls back to back (thread_drives_), waiters
// leave the collectives to it, and while a waiter drives, this one stays off (YieldToHelper).
// Where this thread has a core of its own (8 cores per rank), the two used to take turns round by
// round and mid-size all-reduces took far longer than MPI_Allreduce; the command that measures it
// and its figures are in bench/README.md ("Figures moved from comments"):
//   mpirun -np 2 --allow-run-as-root --bind-to core bazel-bin/bench/dist_bench --reps=20
void MpiProgress::Main() {
  if (!Initialize()) return;
  IdleState idle;
  uint64_t help_seen = 0;
  std::deque<std::function<void()>> calls;
  while (WaitForWork(&calls)) {
    switch (RunPass(&calls, &idle, &help_seen)) {
      case IdleAction::kYield:
        std::this_thread::yield();  // let the compute threads (or a driving waiter) have the core
        break;
      case IdleAction::kNap:
        std::this_thread::sleep_for(kNap);
        break;
      case IdleAction::kPollNow:
      case IdleAction::kWaitForWork:
        break;
    }
  }
  Finalize();
}

// One turn of the thread: RunOnThread's calls, then a pass over the collectives unless a waiter
// drives them. Returns what to do before the next turn.
IdleAction MpiProgress::RunPass(std::deque<std::function<void()>>* calls, IdleState* idle,
                                uint64_t* help_seen) {
  if (!calls->empty()) {
    driver_.lock();  // RunOnThread's calls run here, whoever drives now
  } else if (help_rounds_.load(std::memory_order_relaxed) != *help_seen) {
    YieldToHelper();
    *help_seen = help_rounds_.load(std::memory_order_relaxed);
    idle->Moved(IdleState::Clock::now());  // what the waiter left may still be moving
    return IdleAction::kPollNow;
  } else if (!driver_.try_lock()) {
    return IdleAction::kYield;  // a waiter drives: let it have the core
  }
  MutexLock drive(&driver_, std::adopt_lock);
  for (auto& call : *calls) call();
  calls->clear();
  PollRounds(idle);
  CheckDeadlines();
  const IdleAction next = DecideIdle({.running = !active_.empty(),
                                      .idle_rounds = idle->idle_rounds,
                                      .since_moved = IdleState::Clock::now() - idle->last_moved,
                                      .largest_payload_bytes = LargestPayload()});
  // Past busy, a waiter may take the collectives.
  thread_drives_.store(next == IdleAction::kPollNow, std::memory_order_relaxed);
  return next;
}

// Up to kRoundsPerPass rounds back to back with driver_ held, until nothing runs or something is
// handed over. Between passes the thread looks at the time limits and, once busy is over, yields
// (or naps): every pass, not every round (a yield costs several rounds).
void MpiProgress::PollRounds(IdleState* idle) {
  const uint64_t hand_overs = hand_overs_.load(std::memory_order_relaxed);
  thread_drives_.store(true, std::memory_order_relaxed);
  for (int round = 0; round < kRoundsPerPass; ++round) {
    if (Step()) {
      idle->Moved(IdleState::Clock::now());
    } else {
      idle->Idle();
    }
    if (active_.empty() || hand_overs_.load(std::memory_order_relaxed) != hand_overs) break;
  }
}

void MpiProgress::Finalize() {
  MutexLock drive(&driver_);
  MutexLock lock(&mu_);
  nbc_.Close();
  // Not after a timeout: the timed-out collective is still pending, and finalizing would hang.
  if (with_mpi_ && !broken_) MPI_Finalize();
}

// Until there is something to do: RunOnThread's calls (moved into `calls`), a collective running
// or ready to start. False when the thread should stop.
bool MpiProgress::WaitForWork(std::deque<std::function<void()>>* calls) {
  MutexLock lock(&mu_);
  const auto running = [&] { return running_.load(std::memory_order_seq_cst) != 0; };
  const auto wake = [&]() WEFT_REQUIRES(mu_) {
    return stop_ || !calls_.empty() || running() ||
           (!submitted_.empty() && submitted_.begin()->first == next_start_);
  };
  // sleeping_ is set before wake() is looked at, and a helper that leaves collectives running sets
  // running_ before it reads sleeping_: one of the two sees the other.
  const auto sleep = [&](auto wait) {
    thread_drives_.store(false, std::memory_order_relaxed);  // waiters drive what comes meanwhile
    sleeping_.store(true, std::memory_order_seq_cst);
    wait();
    sleeping_.store(false, std::memory_order_seq_cst);
  };
  if (!wake() && submitted_.empty()) {
    lock.Unlock();
    SpinForHandOver();
    lock.Lock();
  }
  // Until a hand-over, even one that must wait for an earlier collective (its time limit runs).
  if (submitted_.empty())
    sleep([&] {
      lock.Wait(cv_, [&]() WEFT_REQUIRES(mu_) { return wake() || !submitted_.empty(); });
    });
  // Handed over but waiting for an earlier one: wake up now and then to check the time limit.
  if (!running() && !submitted_.empty())
    sleep([&] { lock.WaitFor(cv_, std::chrono::milliseconds(50), wake); });
  if (stop_ && !running() && calls_.empty()) return false;
  calls->swap(calls_);
  return true;
}

bool MpiProgress::TryTakeDriver() {
  if (!any_thread_ || tls_driving) return false;
  return driver_.try_lock();
}

// running_ is stored (seq_cst) before sleeping_ is read, and the thread stores sleeping_ before
// it reads running_: one of the two sees the other.
void MpiProgress::WakeThreadIfLeft() {
  if (running_.load(std::memory_order_seq_cst) != 0 && sleeping_.load(std::memory_order_seq_cst)) {
    MutexLock relock(&mu_);  // the thread must go on with what this one leaves
    cv_.notify_all();
  }
}

bool MpiProgress::Help() {
  if (outstanding_.load(std::memory_order_relaxed) == 0) return false;
  if (thread_drives_.load(std::memory_order_relaxed))
    return false;                      // it polls back to back: leave them to it
  if (!TryTakeDriver()) return false;  // another thread drives: the waiter may yield to it
  {
    MutexLock drive(&driver_, std::adopt_lock);
    Driving driving;
    Step();
    const uint64_t round =
        help_rounds_.load(std::memory_order_relaxed) + 1;  // only the driver writes it
    help_rounds_.store(round, std::memory_order_relaxed);
    if (round % kRoundsPerDeadlineLook == 0) CheckDeadlines();
  }
  WakeThreadIfLeft();
  return outstanding_.load(std::memory_order_relaxed) != 0;
}

// Idle: a collective often comes right after another (the buckets of one backward, a wait then
// the next call), and a sleep costs a futex wake-up per collective, several microseconds. So the
// thread first yields the core in a loop for up to kSpin, watching for a hand-over.
void MpiProgress::SpinForHandOver() {
  const uint64_t seen = hand_overs_.load(std::memory_order_relaxed);
  const Clock::time_point until = Clock::now() + kSpin;
  while (hand_overs_.load(std::memory_order_relaxed) == seen && Clock::now() < until)
    std::this_thread::yield();
}

// On a core of its own, this thread and a waiter that both drive would take turns at the
// collectives, and MPI's state and the fragments it copies would move between their cores.
void MpiProgress::YieldToHelper() {
  thread_drives_.store(false,
                       std::memory_order_relaxed);  // a waiter that got in between passes drives on
  const uint64_t hand_overs = hand_overs_.load(std::memory_order_relaxed);
  uint64_t seen = help_rounds_.load(std::memory_order_relaxed);
  for (int quiet = 0;
       quiet < kQuietLooks && hand_overs_.load(std::memory_order_relaxed) == hand_overs;) {
    std::this_thread::yield();
    const uint64_t now = help_rounds_.load(std::memory_order_relaxed);
    quiet = now == seen ? quiet + 1 : 0;
    seen = now;
  }
}

size_t MpiProgress::LargestPayload() const {
  size_t bytes = 0;
  for (const Active& a : active_) bytes = std::max(bytes, a.work.what.PayloadBytes());
  return bytes;
}

bool MpiProgress::Step() {
  const size_t before = active_.size();
  StartReady();
  const bool started = active_.size() != before;
  return TestActive() || started;
}

// Starts, in sequence order, every handed-over collective whose predecessors have all started.
// Looks (under mu_) only when something was handed over since its last look.
void MpiProgress::StartReady() {
  const uint64_t hand_overs =
      hand_overs_.load(std::memory_order_relaxed);  // counted under mu_, after the emplace
  if (hand_overs == start_look_) return;
  start_look_ = hand_overs;
  while (true) {
    Active a;
    {
      MutexLock lock(&mu_);
      auto it = submitted_.begin();
      if (it == submitted_.end() || it->first != next_start_) return;
      a.work = std::move(it->second.first);
      a.deadline = it->second.second;
      submitted_.erase(it);
      ++next_start_;
    }
    try {
      a.work.start(&a.request);
    } catch (...) {
      Complete(a.work, Named(a.work, std::current_exception()));
      continue;
    }
    active_.push_back(std::move(a));
    running_.store(active_.size(), std::memory_order_seq_cst);
    MutexLock lock(&mu_);
    ++started_;
  }
}

// Tests the running collectives; completes those that are done. True when any completed.
bool MpiProgress::TestActive() {
  bool any = false;
  for (size_t i = 0; i < active_.size();) {
    int flag = 0;
    int rc = MPI_SUCCESS;
    std::exception_ptr test_error;
    if (active_[i].work.test) {
      try {
        flag = active_[i].work.test();
      } catch (...) {
        test_error = std::current_exception();
      }
    } else {
      rc = MPI_Test(&active_[i].request, &flag, MPI_STATUS_IGNORE);
    }
    if (rc == MPI_SUCCESS && !flag && !test_error) {
      ++i;
      continue;
    }
    Active a = std::move(active_[i]);
    active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    running_.store(active_.size(), std::memory_order_seq_cst);
    std::exception_ptr error = test_error;
    try {
      if (test_error) std::rethrow_exception(test_error);
      if (rc != MPI_SUCCESS) MpiCheck(rc, "MPI_Test");
      if (a.work.finish) a.work.finish();
    } catch (...) {
      error = Named(a.work, std::current_exception());
    }
    Complete(a.work, error);
    any = true;
  }
  return any;
}

void MpiProgress::CheckDeadlines() {
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < active_.size(); ++i) {
    if (now < active_[i].deadline) continue;
    Active a = std::move(active_[i]);
    active_.erase(active_.begin() + static_cast<std::ptrdiff_t>(i));
    running_.store(active_.size(), std::memory_order_seq_cst);
    TimeOut(a.work, "started, not complete: another rank has not started it");
    return;  // one per round: TimeOut may have changed the maps
  }
  MpiWork late;
  {
    MutexLock lock(&mu_);
    auto it = submitted_.begin();
    if (it == submitted_.end() || now < it->second.second) return;
    late = std::move(it->second.first);
    submitted_.erase(it);
  }
  TimeOut(late, "not started: an earlier collective of this rank never became ready");
}

}  // namespace weft::dist::internal
