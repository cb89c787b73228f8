#include "engine/gpu/device_error.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/mutex.h"
#include "core/no_destructor.h"

namespace weft::gpu {

namespace {

// What became of a record's current use. Raised: a wait raised it (WaitForAll leaves it).
// Retired: WaitForAll retired it (nothing raises it). Abandoned: its check never finished; the
// record is never used again (a kernel of that use may still write it).
enum class Fate : uint8_t { kOpen, kRaised, kRetired, kAbandoned };

uint64_t LoadAcquire(const uint64_t& field) { return __atomic_load_n(&field, __ATOMIC_ACQUIRE); }

}  // namespace

// The host's side of one check. `ticket`, `message` and `device` change only in the pool, under
// its lock, while no one holds a reference; a holder reads them without a lock. The report is
// written by the device: `done` last, after a system-wide fence (device_error.cuh), so a host that
// reads done == ticket (acquire) then reads the use's other fields as the device wrote them.
class DeviceErrorRecord {
 public:
  bool Done() const { return LoadAcquire(report->done) == ticket; }
  bool Failed() const { return Done() && LoadAcquire(report->failed) == ticket; }
  std::exception_ptr Exception() const {
    const auto* r = const_cast<const volatile DeviceErrorReport*>(report);
    return std::make_exception_ptr(weft::Error(message(r->item, r->value)));
  }

  int device = 0;
  unsigned long long* first_bad = nullptr;  // device memory
  DeviceErrorReport* report = nullptr;      // host memory
  DeviceErrorReport* report_on_device = nullptr;
  bool fresh = true;  // first_bad never set
  uint64_t ticket = 0;
  DeviceErrorMessage message;
  // Holders: DeviceErrors lists (a stream's, completions'). Relaxed increments (a holder already
  // has one); the last release (acq_rel) hands the record back to the pool.
  std::atomic<int> refs{0};
  // CAS from kOpen; written by waits, WaitForAll and the pool. A record never used is retired: its
  // zeroed report reads as done and failed for ticket 0, and there is nothing to raise.
  std::atomic<Fate> fate{Fate::kRetired};
};

namespace {

// Records of every device, made kChunk at a time. mu_ guards the lists, and the records' use
// fields (ticket, message, fresh, fate's reset) while no one holds them.
class RecordPool {
 public:
  static RecordPool& Get() {
    static NoDestructor<RecordPool> pool;  // no CUDA call at exit
    return *pool;
  }

  AcquiredRecord Acquire(int device, DeviceErrorMessage message) {
    WEFT_CHECK(device >= 0 && device < kMaxDevices)
        << "expected a GPU id below " << kMaxDevices << ", found " << device;
    MutexLock lock(&mu_);
    DeviceErrorRecord* r = Take(device);
    r->ticket = next_ticket_++;
    r->message = std::move(message);
    r->fate.store(Fate::kOpen, std::memory_order_relaxed);
    r->refs.store(1, std::memory_order_relaxed);
    const bool fresh = std::exchange(r->fresh, false);
    return {r, DeviceErrorSlot{r->first_bad, r->report_on_device, r->ticket}, fresh};
  }

  void Release(DeviceErrorRecord* r) {
    if (r->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    MutexLock lock(&mu_);
    released_[r->device].push_back(r);
  }

  std::exception_ptr Retire() {
    MutexLock lock(&mu_);
    const DeviceErrorRecord* first = nullptr;
    for (DeviceErrorRecord* r : all_) {
      const Fate fate = r->fate.load(std::memory_order_acquire);
      if (fate == Fate::kRetired || fate == Fate::kAbandoned || !r->Failed()) continue;
      if (fate == Fate::kOpen && (first == nullptr || r->ticket < first->ticket)) first = r;
      r->fate.store(Fate::kRetired, std::memory_order_release);
    }
    return first ? first->Exception() : nullptr;
  }

 private:
  static constexpr int kMaxDevices = 16;
  static constexpr int kChunk = 64;

  // A used record if one is free (a fresh one costs its op a memset, which ends a launch batch).
  DeviceErrorRecord* Take(int device) WEFT_REQUIRES(mu_) {
    if (free_[device].empty()) Recycle(device);
    std::vector<DeviceErrorRecord*>& from = !free_[device].empty() ? free_[device] : fresh_[device];
    if (from.empty()) Grow(device);
    DeviceErrorRecord* r = from.back();
    from.pop_back();
    return r;
  }

  // Moves the released records whose last check is done, and that WaitForAll need not raise,
  // back to the free list; drops the abandoned ones; keeps the others (checks still running,
  // failures no wait has raised).
  void Recycle(int device) WEFT_REQUIRES(mu_) {
    std::vector<DeviceErrorRecord*>& released = released_[device];
    size_t kept = 0;
    for (DeviceErrorRecord* r : released) {
      const Fate fate = r->fate.load(std::memory_order_acquire);
      if (fate == Fate::kAbandoned) continue;
      if (r->Done() && (fate != Fate::kOpen || !r->Failed())) {
        free_[device].push_back(r);
      } else {
        released[kept++] = r;
      }
    }
    released.resize(kept);
  }

  // kChunk new records of `device`: device words for the notes, pinned reports the device writes.
  void Grow(int device) WEFT_REQUIRES(mu_) {
    DeviceGuard guard(device);
    unsigned long long* notes = nullptr;
    WEFT_CUDA_CHECK(cudaMalloc(&notes, kChunk * sizeof(*notes)));
    void* host = nullptr;
    WEFT_CUDA_CHECK(cudaHostAlloc(&host, kChunk * sizeof(DeviceErrorReport),
                                  cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(host, 0, kChunk * sizeof(DeviceErrorReport));  // tickets start at 1: no use is done
    void* mapped = nullptr;
    WEFT_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
    chunks_.push_back(std::make_unique<DeviceErrorRecord[]>(kChunk));
    for (int i = 0; i < kChunk; ++i) {
      DeviceErrorRecord& r = chunks_.back()[i];
      r.device = device;
      r.first_bad = notes + i;
      r.report = static_cast<DeviceErrorReport*>(host) + i;
      r.report_on_device = static_cast<DeviceErrorReport*>(mapped) + i;
      all_.push_back(&r);
      fresh_[device].push_back(&r);
    }
  }

  Mutex mu_;
  uint64_t next_ticket_ WEFT_GUARDED_BY(mu_) = 1;
  std::vector<DeviceErrorRecord*> fresh_[kMaxDevices] WEFT_GUARDED_BY(mu_);  // never used
  std::vector<DeviceErrorRecord*> free_[kMaxDevices] WEFT_GUARDED_BY(mu_);   // used, free again
  // No references left, maybe not free.
  std::vector<DeviceErrorRecord*> released_[kMaxDevices] WEFT_GUARDED_BY(mu_);
  std::vector<DeviceErrorRecord*> all_ WEFT_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<DeviceErrorRecord[]>> chunks_;
};

}  // namespace

AcquiredRecord AcquireErrorRecord(int device, DeviceErrorMessage message) {
  return RecordPool::Get().Acquire(device, std::move(message));
}

DeviceErrors::DeviceErrors(DeviceErrors&& other) noexcept : records_(other.records_) {
  other.records_.clear();
}

DeviceErrors& DeviceErrors::operator=(DeviceErrors&& other) noexcept {
  if (this != &other) {
    Clear();
    records_ = other.records_;
    other.records_.clear();
  }
  return *this;
}

void DeviceErrors::Add(DeviceErrorRecord* record) { records_.push_back(record); }

void DeviceErrors::Inherit(const DeviceErrors& from) {
  for (DeviceErrorRecord* r : from.records_) {
    const Fate fate = r->fate.load(std::memory_order_acquire);
    if (fate == Fate::kRetired || fate == Fate::kAbandoned || (r->Done() && !r->Failed())) continue;
    bool present = false;
    for (const DeviceErrorRecord* mine : records_) present = present || mine == r;
    if (present) continue;
    r->refs.fetch_add(1, std::memory_order_relaxed);
    records_.push_back(r);
  }
}

std::exception_ptr DeviceErrors::TakeFailure() const {
  DeviceErrorRecord* first = nullptr;
  for (DeviceErrorRecord* r : records_) {
    Fate fate = r->fate.load(std::memory_order_acquire);
    if (!r->Done()) {
      r->fate.compare_exchange_strong(fate, Fate::kAbandoned, std::memory_order_acq_rel);
      continue;
    }
    if (fate == Fate::kRetired || !r->Failed()) continue;
    if (first == nullptr || r->ticket < first->ticket) first = r;
  }
  if (first == nullptr) return nullptr;
  Fate open = Fate::kOpen;
  first->fate.compare_exchange_strong(open, Fate::kRaised, std::memory_order_acq_rel);
  return first->Exception();
}

void DeviceErrors::Clear() {
  for (DeviceErrorRecord* r : records_) RecordPool::Get().Release(r);
  records_.clear();
}

std::exception_ptr RetireDeviceErrors() { return RecordPool::Get().Retire(); }

}  // namespace weft::gpu
