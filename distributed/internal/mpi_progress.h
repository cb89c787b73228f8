// MpiProgress: the thread that drives the process's MPI calls (it initializes MPI and finalizes
// it), starts the collectives handed to it in their sequence
// order, polls them to completion and completes their engine ops. NCCL's collectives go through it
// too (started on a communication stream, polled through an event: MpiWork::test), so that MPI's
// and NCCL's share one order; a world of one without a launcher runs it without MPI. Collectives
// are numbered at push (NextSequence, on the pushing thread) and handed over (Submit) by their
// engine op when its inputs are ready, in whatever order the engine finds them ready; the thread
// starts #k only after #k-1, so every rank starts them in the order they were pushed.
//
// Waiters help (engine/wait_helper.h): a thread that waits for an array (WaitForVar) may itself
// start the next collectives in order, test them and complete their ops, for as long as it
// watches before it sleeps, so that a small collective costs no switch between that thread and
// this one (on a shared core, two switches cost more than a 1 KB all-reduce). Whoever makes
// collective calls holds `driver_`: MPI is initialized MPI_THREAD_SERIALIZED for that (with only
// FUNNELED, nobody helps: this thread makes every call). One thread drives at a time, from one
// core: a waiter does not take the collectives while this thread polls them back to back, and
// this thread stays off them while a waiter drives (YieldToHelper). A waiter that gives up leaves
// the running collectives to this thread, which it wakes if it sleeps.
//
// Time limit: a collective handed over and not complete within the timeout (started or still
// waiting for an earlier one that never came: its op was skipped after an error on its inputs)
// fails with a weft::Error naming it and the ranks; with abort_on_timeout the job is aborted
// with that message instead (MPI_Abort), since the other ranks are stuck in it too.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "distributed/communicator.h"
#include "distributed/internal/collective_name.h"
#include "distributed/internal/idle_policy.h"
#include "distributed/internal/nbc_algorithm.h"
#include "engine/engine.h"
#include "engine/wait_helper.h"

namespace weft::dist::internal {

// One collective, as its engine op hands it over.
struct MpiWork {
  uint64_t sequence = 0;
  CollectiveName what;  // for messages: what.ToString()
  std::function<void(MPI_Request*)>
      start;                     // by the driving thread (driver_ held): starts the collective
  std::function<void()> finish;  // by the driving thread, after completion (unpack, scale)
  std::optional<engine::OnComplete> done;  // the engine op's completion, called once
  std::function<bool()> test;              // true once complete; null: MPI_Test on the request
  std::function<void()> cancel;  // on a timeout, before the error (ncclCommAbort); may be null
  // The collective's device work ran on a stream of its own, which `test` saw complete: a
  // success completes the op OnComplete::AfterDeviceWork (no completion on the worker's stream).
  bool device_work = false;
};

class MpiProgress final : public engine::WaitHelper {
 public:
  // Starts the thread and waits until MPI is initialized. Throws weft::Error when MPI cannot be
  // (again) initialized.
  // with_mpi false: a world of one that makes no MPI call (for NCCL without a launcher).
  MpiProgress(const CommOptions& options, bool with_mpi);
  // Waits for every pushed collective (up to the timeout), finalizes MPI and joins the thread.
  ~MpiProgress() override;
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }

  uint64_t NextSequence();
  void Submit(
      MpiWork work);  // any thread; completes the work's op (with an error, after a timeout)
  // Runs `fn` on the progress thread and waits for it (MPI setup calls: NCCL's bootstrap).
  void RunOnThread(std::function<void()> fn);
  // Waits for every pushed collective (up to the timeout; see the destructor).
  void Drain() { WaitIdle(); }
  // Collectives handed over and waiting for an earlier one to start (for tests of the order).
  size_t waiting() const;
  uint64_t started() const;  // collectives started so far (their start function has returned)
  bool asleep() const { return sleeping_.load(); }  // the thread waits for a hand-over (for tests)
  // The all-reduce algorithm of MPI's non-blocking collectives: for the start functions, which
  // run on this thread.
  NbcAlgorithm& nbc() { return nbc_; }
  // The process's MpiProgress, or null.
  static MpiProgress* Instance();
  // A waiting thread's turn (engine::WaitHelper): drives the collectives unless another thread
  // does; true while any is handed over and not complete.
  bool Help() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Active {
    MpiWork work;
    MPI_Request request = MPI_REQUEST_NULL;
    Clock::time_point deadline;
  };

  static constexpr std::chrono::microseconds kSpin{50};  // an idle thread's spin before it sleeps
  // A helping waiter looks at the time limits every so many rounds (a clock read and a lock per
  // round cost a noticeable share of a small all-reduce); the thread, every kRoundsPerPass.
  static constexpr int kRoundsPerDeadlineLook = 64;
  static constexpr int kRoundsPerPass = 64;  // the thread's rounds between two idle decisions
  static constexpr int kQuietLooks = 8;      // YieldToHelper's looks (a yield each) without a Help

  void Main();
  // One turn of the thread with work in hand (mpi_progress_loop.cc); what to do before the next.
  IdleAction RunPass(std::deque<std::function<void()>>* calls, IdleState* idle,
                     uint64_t* help_seen);
  void PollRounds(IdleState* idle) WEFT_REQUIRES(driver_);  // a pass: up to kRoundsPerPass rounds
  void Finalize();
  // Takes driver_ unless another thread holds it or this thread already does (a completion that
  // runs an op inline may wait, and help, again). False when it did not take it.
  bool TryTakeDriver() WEFT_TRY_ACQUIRE(true, driver_);
  // Wakes this thread if it sleeps while collectives it must poll are left (after a Help).
  void WakeThreadIfLeft();
  void SpinForHandOver();
  // While a waiter drives (help_rounds_ moves), this thread leaves the collectives to it; it
  // takes them back once Help has not driven for kQuietLooks looks in a row, or at a hand-over.
  void YieldToHelper();
  bool Initialize();  // false: MPI could not be initialized (init_error_ says why)
  void InitializeMpi();
  bool WaitForWork(std::deque<std::function<void()>>* calls);  // false: stop
  // Of the collectives in flight, for Patience.
  size_t LargestPayload() const WEFT_REQUIRES(driver_);
  // One round: start what may start, test what runs; true when anything moved.
  bool Step() WEFT_REQUIRES(driver_);
  void StartReady() WEFT_REQUIRES(driver_);
  bool TestActive() WEFT_REQUIRES(driver_);
  void CheckDeadlines() WEFT_REQUIRES(driver_);
  void TimeOut(const MpiWork& work, const char* state);
  // "dist: collective #3 all-reduce (sum of 256 float32 in 1 array) on rank 0 of 2 (mpi)".
  std::string Describe(const MpiWork& work) const;
  // A start's, a test's or a finish's error, as a weft::Error that begins with Describe(work).
  std::exception_ptr Named(const MpiWork& work, std::exception_ptr error) const;
  void Complete(MpiWork& work, std::exception_ptr error);
  void WaitIdle();  // the destructor's wait for every pushed collective
  bool NothingLeft() const WEFT_REQUIRES(mu_);

  const CommOptions options_;
  const bool with_mpi_;
  int rank_ = 0, size_ = 1, local_rank_ = 0;  // set before the constructor returns, then constant

  // cv_ signals hand-overs, completions and stop_.
  mutable Mutex mu_;
  std::condition_variable cv_;
  // By sequence, not yet started.
  std::map<uint64_t, std::pair<MpiWork, Clock::time_point>> submitted_ WEFT_GUARDED_BY(mu_);
  std::deque<std::function<void()>> calls_ WEFT_GUARDED_BY(mu_);  // RunOnThread's functions
  uint64_t pushed_ WEFT_GUARDED_BY(mu_) = 0;                      // sequence numbers handed out
  uint64_t next_start_ WEFT_GUARDED_BY(mu_) = 0;  // the sequence number the thread starts next
  uint64_t completed_ WEFT_GUARDED_BY(mu_) = 0;
  uint64_t started_ WEFT_GUARDED_BY(mu_) = 0;  // collectives whose start returned
  bool stop_ WEFT_GUARDED_BY(mu_) = false;
  // Submit and RunOnThread calls: what a spinning thread watches.
  std::atomic<uint64_t> hand_overs_{0};
  std::exception_ptr init_error_ WEFT_GUARDED_BY(mu_);
  bool initialized_ WEFT_GUARDED_BY(mu_) = false;
  // Set by a timeout without abort: every later collective fails.
  std::optional<std::string> broken_ WEFT_GUARDED_BY(mu_);

  // Held by the thread that makes collective calls (this thread or a helping waiter); protects
  // active_ and nbc_. Taken before mu_ where both are held.
  // On lines of their own: a waiter's failed try_lock writes the lock's line, which must not
  // be the line of what the driving thread reads every round.
  alignas(64) mutable Mutex driver_;
  alignas(64) std::vector<Active> active_ WEFT_GUARDED_BY(driver_);  // started, not complete
  // hand_overs_ at StartReady's last look.
  uint64_t start_look_ WEFT_GUARDED_BY(driver_) = ~uint64_t{0};
  // From MPI_Init to MPI_Finalize. Used under driver_, by the collectives' start functions, which
  // the analysis cannot follow (nbc()), so not annotated.
  NbcAlgorithm nbc_;
  // Help's rounds that drove: written under driver_, read by this thread to see that a waiter
  // drives (YieldToHelper); on a line of its own, since the waiter writes it every round.
  alignas(64) std::atomic<uint64_t> help_rounds_{0};
  // This thread polls back to back (busy): waiters do not take the collectives from it. Written
  // twice a pass, read by waiters at each look: on a line of its own.
  alignas(64) std::atomic<bool> thread_drives_{false};
  bool any_thread_ =
      true;  // MPI allows calls from any thread, one at a time (SERIALIZED): waiters may help
  std::atomic<size_t> running_{0};       // active_.size(), for the waits that do not hold driver_
  std::atomic<int64_t> outstanding_{0};  // handed over, not complete: Help's first look
  std::atomic<bool> sleeping_{
      false};  // this thread waits on cv_ (a helper that leaves work wakes it)
  std::thread thread_;
};

}  // namespace weft::dist::internal
