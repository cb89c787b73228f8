#include "distributed/internal/mpi_progress.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <sstream>

#include "core/error.h"
#include "distributed/internal/mpi_check.h"
#include "distributed/internal/open_mpi_defaults.h"

namespace weft::dist::internal {

std::string MpiErrorString(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, length);
}

void MpiCheck(int rc, const char* call) {
  if (rc != MPI_SUCCESS) WEFT_THROW(call << " failed: " << MpiErrorString(rc));
}

namespace {
// One MpiProgress per process: MPI is initialized once and cannot be again after MPI_Finalize.
// Exchanged by constructors only (any order is enough: it is a flag, guarding nothing else).
std::atomic<bool> g_mpi_taken{false};
// The live instance, for tests: set once initialized, cleared by the destructor (sequentially
// consistent: a reader sees either null or an initialized instance).
std::atomic<MpiProgress*> g_instance{nullptr};
}  // namespace

MpiProgress* MpiProgress::Instance() { return g_instance.load(); }

uint64_t MpiProgress::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

size_t MpiProgress::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_.size();
}

MpiProgress::MpiProgress(const CommOptions& options, bool with_mpi)
    : options_(options), with_mpi_(with_mpi) {
  if (with_mpi && g_mpi_taken.exchange(true)) {
    WEFT_THROW(
        "dist: MPI is initialized once per process; a communicator already took it (keep one "
        "ConnectWorld communicator for the whole run)");
  }
  thread_ = std::thread([this] { Main(); });
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return initialized_ || init_error_ != nullptr; });
  if (init_error_) {
    lock.unlock();
    thread_.join();
    std::rethrow_exception(init_error_);
  }
  if (any_thread_)
    engine::AddWaitHelper(this);  // false when another is set: then nobody helps this one
  g_instance.store(this);
}

void MpiProgress::Initialize() {
  std::exception_ptr error;
  try {
    if (with_mpi_) InitializeMpi();
  } catch (...) {
    error = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  init_error_ = error;
  initialized_ = error == nullptr;
  cv_.notify_all();
}

void MpiProgress::InitializeMpi() {
  int finalized = 0;
  WEFT_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) WEFT_THROW("dist: MPI was finalized already; it cannot be initialized again");
  SetOpenMpiDefaults();
  int provided = 0;
  WEFT_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    WEFT_THROW("dist: MPI gives thread level "
               << provided << ", expected at least MPI_THREAD_FUNNELED (" << MPI_THREAD_FUNNELED
               << "): one thread makes every MPI call, "
               << "but it is not the main thread");
  }
  any_thread_ =
      provided >= MPI_THREAD_SERIALIZED;  // else only this thread may call MPI: no helpers
  WEFT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  WEFT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  WEFT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm host;
  WEFT_MPI_CHECK(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host));
  WEFT_MPI_CHECK(MPI_Comm_rank(host, &local_rank_));
  WEFT_MPI_CHECK(MPI_Comm_free(&host));
  nbc_ = NbcAlgorithm::Connect();
}

MpiProgress::~MpiProgress() {
  g_instance.store(nullptr);
  engine::RemoveWaitHelper(this);  // if it is the one set; from here on, only this thread drives
  WaitIdle();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool MpiProgress::NothingLeft() const { return completed_ == pushed_ || broken_.has_value(); }

void MpiProgress::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  // Each collective handed over is completed by the thread (or timed out); one never handed over
  // (its op was skipped) leaves the count short: after the time limit, go on without it.
  const auto limit = std::chrono::duration<double>(options_.timeout_seconds);
  if (cv_.wait_for(lock, limit, [&] { return NothingLeft(); })) return;
  const uint64_t missing = pushed_ - completed_;
  lock.unlock();
  std::fprintf(
      stderr, "weft: dist: rank %d of %d: %llu collective(s) pushed but not complete at shutdown\n",
      rank_, size_, static_cast<unsigned long long>(missing));
  if (options_.abort_on_timeout && with_mpi_) MPI_Abort(MPI_COMM_WORLD, 1);
}

uint64_t MpiProgress::NextSequence() {
  std::lock_guard<std::mutex> lock(mu_);
  return pushed_++;
}

void MpiProgress::Submit(MpiWork work) {
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) {
    const std::string message = *broken_;
    ++completed_;
    lock.unlock();
    (*work.done)(std::make_exception_ptr(Error(message)));
    return;
  }
  const uint64_t sequence = work.sequence;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_seconds));
  submitted_.emplace(sequence, std::make_pair(std::move(work), deadline));
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  hand_overs_.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  // The thread (or a waiter) starts it: wake the thread only if it sleeps (a futex call each time
  // costs the worker a microsecond). The emplace under mu_ and the thread's look at its wait's
  // predicate under mu_, after it stores sleeping_, order the two.
  if (sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> relock(mu_);
    cv_.notify_all();
  }
}

void MpiProgress::RunOnThread(std::function<void()> fn) {
  std::packaged_task<void()> task(std::move(fn));
  std::future<void> result = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back([&task] { task(); });
    hand_overs_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
  }
  result.get();  // rethrows fn's exception
}

}  // namespace weft::dist::internal

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
// them: at once for kBusyRounds rounds that found nothing (as MPI's own blocking calls poll), then
// yielding the core between passes of kRoundsPerPass rounds for as long as the collectives in
// flight could take (Patience), then with 20 us naps between passes (a peer that is late, e.g.
// saving a file, costs no core).
//
// One thread drives a collective: while this one polls back to back (thread_drives_), waiters
// leave the collectives to it, and while a waiter drives, this one stays off (YieldToHelper).
// Where this thread has a core of its own (the 16-core host, 8 cores per rank), the two used to
// take turns round by round, this one yielded every round past kBusyRounds (a 256 KB all-reduce
// was still moving then), and the lock waiters try shared a cache line with active_: 256 KB to
// 1 MB all-reduces took 1.35x to 1.8x MPI_Allreduce's time there, 1.13x to 1.22x since (1
// KB 5.4-6.9x, now 4.3-4.6x; one core per rank, where waiters drive, unchanged: 1.05-1.13x).
//
// Napping sooner is wrong: a large message between processes that cannot map each other's memory
// (Open MPI's single copy off, as on the H200 machine) moves in fragments that only MPI calls copy,
// and naps after 2,000 rounds made a 64 MB all-reduce 1.8x (there) to 2.6x (here,
// btl_vader_single_copy_mechanism none) MPI_Allreduce's time.
void MpiProgress::Main() {
  Initialize();
  if (!initialized_) return;
  int idle_rounds = 0;
  Clock::time_point last_moved = Clock::now();
  uint64_t help_seen = 0;
  std::deque<std::function<void()>> calls;
  while (WaitForWork(&calls)) {
    std::unique_lock<std::mutex> drive(driver_, std::defer_lock);
    if (!calls.empty()) {
      drive.lock();  // RunOnThread's calls run here, whoever drives now
    } else if (help_rounds_.load(std::memory_order_relaxed) != help_seen) {
      YieldToHelper();
      help_seen = help_rounds_.load(std::memory_order_relaxed);
      idle_rounds = 0;  // what the waiter left may still be moving: busy, then patient, again
      last_moved = Clock::now();
      continue;
    } else if (!drive.try_lock()) {
      std::this_thread::yield();  // a waiter drives: let it have the core
      continue;
    }
    for (auto& call : calls) call();
    calls.clear();
    // A pass: up to kRoundsPerPass rounds back to back with driver_ held, until nothing runs or
    // something is handed over. Between passes the thread looks at the time limits and, once busy
    // is over, yields (or naps): every pass, not every round (a yield costs several rounds).
    const uint64_t hand_overs = hand_overs_.load(std::memory_order_relaxed);
    bool running = false;
    thread_drives_.store(true, std::memory_order_relaxed);
    for (int round = 0; round < kRoundsPerPass; ++round) {
      const bool moved = Step();
      running = !active_.empty();
      idle_rounds = moved ? 0 : std::min(idle_rounds + 1, kBusyRounds);
      if (moved) last_moved = Clock::now();
      if (!running || hand_overs_.load(std::memory_order_relaxed) != hand_overs) break;
    }
    CheckDeadlines();
    running = !active_.empty();
    const bool busy =
        running && idle_rounds < kBusyRounds;  // the next message is usually microseconds away
    const bool patient = running && !busy && Clock::now() - last_moved < Patience();
    thread_drives_.store(busy, std::memory_order_relaxed);  // past busy, a waiter may take them
    drive.unlock();
    if (busy) continue;
    if (patient) {
      std::this_thread::yield();  // let the compute threads have a shared core
    } else if (running) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  std::lock_guard<std::mutex> drive(driver_);
  std::lock_guard<std::mutex> lock(mu_);
  nbc_.Close();
  if (with_mpi_ && !broken_)
    MPI_Finalize();  // a timed-out collective is still pending: finalizing would hang
}

// Until there is something to do: RunOnThread's calls (moved into `calls`), a collective running
// or ready to start. False when the thread should stop.
bool MpiProgress::WaitForWork(std::deque<std::function<void()>>* calls) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto running = [&] { return running_.load(std::memory_order_seq_cst) != 0; };
  const auto wake = [&] {
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
    lock.unlock();
    SpinForHandOver();
    lock.lock();
  }
  // Until a hand-over, even one that must wait for an earlier collective (its time limit runs).
  if (submitted_.empty())
    sleep([&] { cv_.wait(lock, [&] { return wake() || !submitted_.empty(); }); });
  // Handed over but waiting for an earlier one: wake up now and then to check the time limit.
  if (!running() && !submitted_.empty())
    sleep([&] { cv_.wait_for(lock, std::chrono::milliseconds(50), wake); });
  if (stop_ && !running() && calls_.empty()) return false;
  calls->swap(calls_);
  return true;
}

template <typename Drive>
bool MpiProgress::TryDrive(Drive drive) {
  if (!any_thread_ || tls_driving) return false;
  std::unique_lock<std::mutex> lock(driver_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread drives
  {
    Driving driving;
    drive();
  }
  lock.unlock();
  // running_ is stored (seq_cst) before sleeping_ is read, and the thread stores sleeping_ before
  // it reads running_: one of the two sees the other.
  if (running_.load(std::memory_order_seq_cst) != 0 && sleeping_.load(std::memory_order_seq_cst)) {
    std::lock_guard<std::mutex> relock(mu_);  // the thread must go on with what this one leaves
    cv_.notify_all();
  }
  return true;
}

bool MpiProgress::Help() {
  if (outstanding_.load(std::memory_order_relaxed) == 0) return false;
  if (thread_drives_.load(std::memory_order_relaxed))
    return false;  // it polls back to back: leave them to it
  if (!TryDrive([this] {
        Step();
        const uint64_t round =
            help_rounds_.load(std::memory_order_relaxed) + 1;  // only the driver writes it
        help_rounds_.store(round, std::memory_order_relaxed);
        if (round % kRoundsPerDeadlineLook == 0) CheckDeadlines();
      })) {
    return false;  // another thread drives: the waiter may yield to it
  }
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

MpiProgress::Clock::duration MpiProgress::Patience() const {
  size_t bytes = 0;
  for (const Active& a : active_) bytes = std::max(bytes, a.work.what.PayloadBytes());
  const auto at_1_gb_per_s = std::chrono::nanoseconds(bytes);  // a byte per nanosecond
  return std::max<Clock::duration>(kMinPatience, at_1_gb_per_s);
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
      std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
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
    std::lock_guard<std::mutex> lock(mu_);
    auto it = submitted_.begin();
    if (it == submitted_.end() || now < it->second.second) return;
    late = std::move(it->second.first);
    submitted_.erase(it);
  }
  TimeOut(late, "not started: an earlier collective of this rank never became ready");
}

std::string MpiProgress::Describe(const MpiWork& work) const {
  std::ostringstream m;
  m << "dist: collective #" << work.sequence << " " << work.what.ToString() << " on rank " << rank_
    << " of " << size_ << (with_mpi_ ? " (mpi)" : " (local)");
  return m.str();
}

std::exception_ptr MpiProgress::Named(const MpiWork& work, std::exception_ptr error) const {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return std::make_exception_ptr(Error(Describe(work) + " failed: " + e.what()));
  } catch (...) {
    return error;  // not ours to describe
  }
}

// The time limit passed: the message names the collective and the ranks. Aborts the job, or
// fails this collective and every later one on this rank.
void MpiProgress::TimeOut(const MpiWork& work, const char* state) {
  std::ostringstream m;
  m << Describe(work) << " did not complete within " << options_.timeout_seconds << " s (" << state
    << "); every rank 0.." << size_ - 1
    << " must push it; a rank may have died, hung or pushed other collectives";
  const std::string message = m.str();
  if (work.cancel) work.cancel();
  if (options_.abort_on_timeout) {
    std::fprintf(stderr, "weft::Error: %s; aborting the job\n", message.c_str());
    std::fflush(stderr);
    if (with_mpi_) MPI_Abort(MPI_COMM_WORLD, 3);
    std::_Exit(3);
  }
  MpiWork failed = work;  // its done is called once, below
  {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = message;
  }
  Complete(failed, std::make_exception_ptr(Error(message)));
}

void MpiProgress::Complete(MpiWork& work, std::exception_ptr error) {
  if (work.device_work && error == nullptr) {
    work.done->AfterDeviceWork();
  } else {
    (*work.done)(std::move(error));
  }
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  ++completed_;
  cv_.notify_all();
}

}  // namespace weft::dist::internal
