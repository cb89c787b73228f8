#include "storage/internal/pooled_storage.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "engine/profiler_hooks.h"

namespace weft {

namespace {

constexpr size_t kAlignment = 64;

class CpuRawAllocator final : public RawAllocator {
 public:
  void* Allocate(size_t bytes) override { return std::aligned_alloc(kAlignment, bytes); }
  void Deallocate(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

std::unique_ptr<RawAllocator> NewCpuRawAllocator() { return std::make_unique<CpuRawAllocator>(); }

void Storage::Copy(void* dst, const void* src, size_t bytes, engine::GpuStream*) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void Storage::Zero(void* dst, size_t bytes, engine::GpuStream*) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

size_t StorageSizeClass(size_t bytes) {
  if (bytes <= kAlignment) return kAlignment;
  // Four classes per power of two: round up to a multiple of 2^(floor(log2(bytes - 1)) - 2).
  size_t high = size_t{1} << (63 - __builtin_clzll(bytes - 1));  // largest power of two < bytes
  size_t step = std::max(kAlignment, high / 4);
  return (bytes + step - 1) / step * step;
}

namespace {

// Every live pool, for the profiler's samples at its start and end. Lock order: live_mu, then a
// pool's lock, then the profiler's.
Mutex live_mu;
std::vector<PooledStorage*>& LivePools() WEFT_REQUIRES(live_mu) {
  static NoDestructor<std::vector<PooledStorage*>> pools;  // guarded by live_mu
  return *pools;
}

void ReportLivePools() {
  MutexLock lock(&live_mu);
  for (PooledStorage* pool : LivePools()) pool->ReportToProfiler();
}

[[maybe_unused]] const bool sampler_registered =
    (engine::AddProfilerSampler(&ReportLivePools), true);

}  // namespace

PooledStorage::PooledStorage(Device device, std::unique_ptr<RawAllocator> raw, std::string name)
    : device_(device),
      name_(name.empty() ? device.ToString() : std::move(name)),
      raw_(std::move(raw)) {
  MutexLock lock(&live_mu);
  LivePools().push_back(this);
}

PooledStorage::~PooledStorage() {
  {
    MutexLock lock(&live_mu);
    std::vector<PooledStorage*>& pools = LivePools();
    pools.erase(std::find(pools.begin(), pools.end(), this));
  }
  ReleaseCache();
}

Block PooledStorage::Alloc(size_t bytes) {
  if (bytes == 0) return Block{nullptr, 0, device_};
  const size_t size = StorageSizeClass(bytes);
  Block block;
  Sample sample;
  {
    SpinLockHolder lock(&mu_);
    block = AllocLocked(bytes, size);
    sample = SampleLocked();
  }
  Report(sample);
  return block;
}

Block PooledStorage::AllocLocked(size_t bytes, size_t size) {
  ++stats_.allocations;
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= size;
    ++stats_.reuses;
  } else {
    ptr = raw_->Allocate(size);
    if (ptr == nullptr) {  // out of memory: give the cache back and try once more
      ReleaseCacheLocked();
      ptr = raw_->Allocate(size);
    }
    if (ptr == nullptr) {
      WEFT_THROW("out of memory on " << device_ << ": asked for " << bytes << " bytes (" << size
                                     << " with rounding); " << stats_.bytes_in_use
                                     << " bytes in use, " << stats_.bytes_cached << " cached");
    }
  }
  stats_.bytes_in_use += size;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return Block{ptr, size, device_};
}

void PooledStorage::Free(Block block) {
  if (block.ptr == nullptr) return;
  WEFT_CHECK(block.device == device_)
      << "a block of " << block.device << " freed to the pool of " << device_;
  Sample sample;
  {
    SpinLockHolder lock(&mu_);
    free_[block.size].push_back(block.ptr);
    stats_.bytes_in_use -= block.size;
    stats_.bytes_cached += block.size;
    sample = SampleLocked();
  }
  Report(sample);
}

PooledStorage::Sample PooledStorage::SampleLocked() const {
  if (!engine::ProfilerRunning()) return {};
  return Sample{stats_.bytes_in_use, stats_.bytes_cached, engine::ProfilerClockNs()};
}

void PooledStorage::Report(const Sample& sample) const {
  if (sample.ns >= 0)
    engine::RecordMemory(device_, name_.c_str(), sample.in_use, sample.cached, sample.ns);
}

void PooledStorage::ReportToProfiler() {
  Sample sample;
  {
    SpinLockHolder lock(&mu_);
    sample = SampleLocked();
  }
  Report(sample);
}

void PooledStorage::ReleaseCacheLocked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) raw_->Deallocate(p, size);
  }
  free_.clear();
  stats_.bytes_cached = 0;
}

void PooledStorage::ReleaseCache() {
  Sample sample;
  {
    SpinLockHolder lock(&mu_);
    ReleaseCacheLocked();
    sample = SampleLocked();
  }
  Report(sample);
}

StorageStats PooledStorage::Stats() const {
  SpinLockHolder lock(&mu_);
  return stats_;
}

void PooledStorage::ResetPeak() {
  SpinLockHolder lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

namespace {

struct Registry {
  Mutex mu;
  std::function<std::unique_ptr<Storage>(Device)> factories[kNumDeviceTypes] WEFT_GUARDED_BY(mu);
  std::unordered_map<Device, std::unique_ptr<Storage>> pools WEFT_GUARDED_BY(mu);
};

Registry& GetRegistry() {
  static NoDestructor<Registry> registry;  // ops free memory at exit
  return *registry;
}

}  // namespace

Storage* GetFromRegistry(Device device);

void RegisterStorageFactory(DeviceType type,
                            std::function<std::unique_ptr<Storage>(Device)> factory) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  r.factories[static_cast<int>(type)] = std::move(factory);
}

Storage* Storage::Get(Device device) {
  // The CPU pool is asked for on every array's allocation and free: skip the registry lock.
  static std::atomic<Storage*> cpu_pool{nullptr};
  if (device.is_cpu()) {
    if (Storage* pool = cpu_pool.load(std::memory_order_acquire)) return pool;
  }
  Storage* pool = GetFromRegistry(device);
  if (device.is_cpu()) cpu_pool.store(pool, std::memory_order_release);
  return pool;
}

Storage* GetFromRegistry(Device device) {
  Registry& r = GetRegistry();
  MutexLock lock(&r.mu);
  auto it = r.pools.find(device);
  if (it != r.pools.end()) return it->second.get();
  std::unique_ptr<Storage> pool;
  if (device.is_cpu()) {
    pool = std::make_unique<PooledStorage>(device, NewCpuRawAllocator());
  } else if (auto& factory = r.factories[static_cast<int>(device.type)]) {
    pool = factory(device);
  } else {
    WEFT_THROW("no memory pool for " << device
                                     << ": expected cpu; this build of weft has no GPU backend "
                                     << "(GPU support comes with a --config=cuda build)");
  }
  Storage* result = pool.get();
  r.pools.emplace(device, std::move(pool));
  return result;
}

}  // namespace weft
