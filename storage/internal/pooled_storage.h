// The pooled allocator behind Storage, over a raw allocator for one device (aligned host memory
// on the CPU; cudaMalloc on a GPU). Thread-safe: one spin lock guards the free lists and counters
// (held for a map lookup; the raw allocator is called under it only on a cache miss).
//
// While a profiler runs (engine/profiler_hooks.h), every change of the counters is sampled, under
// the lock with its time, and reported after it: the trace's "memory <name>" counter track.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/spin_lock.h"
#include "storage/storage.h"

namespace weft {

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  virtual void* Allocate(size_t bytes) = 0;  // null when out of memory
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
};

class PooledStorage final : public Storage {
 public:
  // `name` labels the pool's counters in the profiler's trace; by default the device's name.
  PooledStorage(Device device, std::unique_ptr<RawAllocator> raw, std::string name = "");
  ~PooledStorage() override;
  Block Alloc(size_t bytes) override;
  void Free(Block block) override;
  void ReleaseCache() override;
  StorageStats Stats() const override;
  void ResetPeak() override;
  // Reports the counters to the running profiler (its start and end samples).
  void ReportToProfiler();

 private:
  // The counters at a moment, for the profiler; ns < 0 when none runs.
  struct Sample {
    size_t in_use = 0, cached = 0;
    int64_t ns = -1;
  };
  Block AllocLocked(size_t bytes, size_t size) WEFT_REQUIRES(mu_);
  void ReleaseCacheLocked() WEFT_REQUIRES(mu_);
  Sample SampleLocked() const WEFT_REQUIRES(mu_);
  void Report(const Sample& sample) const;

  const Device device_;
  const std::string name_;
  const std::unique_ptr<RawAllocator> raw_;
  mutable SpinLock mu_;
  std::map<size_t, std::vector<void*>> free_ WEFT_GUARDED_BY(mu_);  // size class -> cached blocks
  StorageStats stats_ WEFT_GUARDED_BY(mu_);
};

std::unique_ptr<RawAllocator> NewCpuRawAllocator();

}  // namespace weft
