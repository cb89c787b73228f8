// The pooled allocator behind Storage, over a raw allocator for one device (aligned host memory
// on the CPU; cudaMalloc on a GPU). Thread-safe: one spin lock guards the free lists and counters
// (held for a map lookup; the raw allocator is called under it only on a cache miss).
#pragma once

#include <map>
#include <mutex>
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
  PooledStorage(Device device, std::unique_ptr<RawAllocator> raw);
  ~PooledStorage() override;
  Block Alloc(size_t bytes) override;
  void Free(Block block) override;
  void ReleaseCache() override;
  StorageStats Stats() const override;
  void ResetPeak() override;

 private:
  void ReleaseCacheLocked();
  const Device device_;
  const std::unique_ptr<RawAllocator> raw_;
  mutable SpinLock mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> cached blocks; guarded by mu_
  StorageStats stats_;                         // guarded by mu_
};

std::unique_ptr<RawAllocator> NewCpuRawAllocator();

}  // namespace weft
