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
  MutexLock lock(&mu_);
  return started_;
}

size_t MpiProgress::waiting() const {
  MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  lock.Wait(cv_, [&]() WEFT_REQUIRES(mu_) { return initialized_ || init_error_ != nullptr; });
  if (const std::exception_ptr error = init_error_) {
    lock.Unlock();
    thread_.join();
    std::rethrow_exception(error);
  }
  if (any_thread_)
    engine::AddWaitHelper(this);  // false when another is set: then nobody helps this one
  g_instance.store(this);
}

bool MpiProgress::Initialize() {
  std::exception_ptr error;
  try {
    if (with_mpi_) InitializeMpi();
  } catch (...) {
    error = std::current_exception();
  }
  MutexLock lock(&mu_);
  init_error_ = error;
  initialized_ = error == nullptr;
  cv_.notify_all();
  return initialized_;
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
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool MpiProgress::NothingLeft() const { return completed_ == pushed_ || broken_.has_value(); }

void MpiProgress::WaitIdle() {
  MutexLock lock(&mu_);
  // Each collective handed over is completed by the thread (or timed out); one never handed over
  // (its op was skipped) leaves the count short: after the time limit, go on without it.
  const auto limit = std::chrono::duration<double>(options_.timeout_seconds);
  if (lock.WaitFor(cv_, limit, [&]() WEFT_REQUIRES(mu_) { return NothingLeft(); })) return;
  const uint64_t missing = pushed_ - completed_;
  lock.Unlock();
  std::fprintf(
      stderr, "weft: dist: rank %d of %d: %llu collective(s) pushed but not complete at shutdown\n",
      rank_, size_, static_cast<unsigned long long>(missing));
  if (options_.abort_on_timeout && with_mpi_) MPI_Abort(MPI_COMM_WORLD, 1);
}

uint64_t MpiProgress::NextSequence() {
  MutexLock lock(&mu_);
  return pushed_++;
}

void MpiProgress::Submit(MpiWork work) {
  MutexLock lock(&mu_);
  if (broken_) {
    const std::string message = *broken_;
    ++completed_;
    lock.Unlock();
    (*work.done)(std::make_exception_ptr(Error(message)));
    return;
  }
  const uint64_t sequence = work.sequence;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_seconds));
  submitted_.emplace(sequence, std::make_pair(std::move(work), deadline));
  outstanding_.fetch_add(1, std::memory_order_relaxed);
  hand_overs_.fetch_add(1, std::memory_order_relaxed);
  lock.Unlock();
  // The thread (or a waiter) starts it: wake the thread only if it sleeps (a futex call each time
  // costs the worker a microsecond). The emplace under mu_ and the thread's look at its wait's
  // predicate under mu_, after it stores sleeping_, order the two.
  if (sleeping_.load(std::memory_order_seq_cst)) {
    MutexLock relock(&mu_);
    cv_.notify_all();
  }
}

void MpiProgress::RunOnThread(std::function<void()> fn) {
  std::packaged_task<void()> task(std::move(fn));
  std::future<void> result = task.get_future();
  {
    MutexLock lock(&mu_);
    calls_.push_back([&task] { task(); });
    hand_overs_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
  }
  result.get();  // rethrows fn's exception
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
    MutexLock lock(&mu_);
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
  MutexLock lock(&mu_);
  ++completed_;
  cv_.notify_all();
}

}  // namespace weft::dist::internal
