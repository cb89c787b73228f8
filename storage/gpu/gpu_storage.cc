#include "storage/gpu/gpu_storage.h"

#include <cuda_runtime.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "core/gpu/cuda_check.h"
#include "core/no_destructor.h"
#include "core/spin_lock.h"
#include "engine/gpu/event_pool.h"
#include "engine/gpu/gpu_stream.h"
#include "storage/internal/pooled_storage.h"

namespace weft::gpu {

namespace {

class CudaRawAllocator final : public RawAllocator {
 public:
  explicit CudaRawAllocator(int device) : device_(device) {}
  void* Allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t error = cudaMalloc(&ptr, bytes);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it, and let the pool release its cache and retry
      return nullptr;
    }
    if (error != cudaSuccess) ThrowCudaError(error, "cudaMalloc(&ptr, bytes)", __FILE__, __LINE__);
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override {
    DeviceGuard guard(device_);
    cudaFree(ptr);
  }

 private:
  const int device_;
};

class PinnedRawAllocator final : public RawAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t error = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    if (error == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    if (error != cudaSuccess)
      ThrowCudaError(error, "cudaHostAlloc(&ptr, bytes)", __FILE__, __LINE__);
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override { cudaFreeHost(ptr); }
};

using engine::GpuStream;

int CurrentDevice() {
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

// A pooled allocator whose frees are stream-ordered: a block freed with FreeAfter stays reserved
// until the event recorded on the stream at that moment has completed; Alloc reclaims finished
// ones first, and, out of memory, waits for all of them and tries once more.
class StreamOrderedStorage : public Storage {
 public:
  // `name` labels the pool's memory counters in the profiler's trace (by default the device's).
  StreamOrderedStorage(Device device, std::unique_ptr<RawAllocator> raw, std::string name = "")
      : device_(device), pool_(device, std::move(raw), std::move(name)) {}

  Block Alloc(size_t bytes) override {
    Reclaim(/*wait=*/false);
    try {
      return pool_.Alloc(bytes);
    } catch (const Error&) {
      if (!Reclaim(/*wait=*/true)) throw;
      return pool_.Alloc(bytes);  // pending frees came back: one more try
    }
  }

  // Without a stream: after all work queued so far on the blocking streams (the legacy stream).
  void Free(Block block) override { FreeAfter(block, nullptr); }

  // The event is of the stream's device; for the pinned pool without a stream, of the current one.
  void FreeAfter(Block block, GpuStream* stream) override {
    if (block.ptr == nullptr) return;
    WEFT_CHECK(block.device == device_)
        << "a block of " << block.device << " freed to the pool of " << device_;
    PooledEvent* done =
        stream != nullptr
            ? EventPool::Get().Record(*stream)
            : EventPool::Get().RecordAfterAll(device_.is_gpu() ? device_.id : CurrentDevice());
    SpinLockHolder lock(&mu_);
    pending_.push_back({block, done});
  }

  void ReleaseCache() override {
    Reclaim(/*wait=*/true);
    pool_.ReleaseCache();
  }

  // Blocks waiting for their stream count as in use until they are reclaimed.
  StorageStats Stats() const override { return pool_.Stats(); }
  void ResetPeak() override { pool_.ResetPeak(); }

 protected:
  Device device() const { return device_; }

 private:
  struct Pending {
    Block block;
    PooledEvent* done;
  };

  // Returns finished pending blocks to the pool (with `wait`, all of them); true if any came back.
  bool Reclaim(bool wait) {
    std::deque<Pending> ready;
    {
      SpinLockHolder lock(&mu_);
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (wait || cudaEventQuery(it->done->event) == cudaSuccess) {
          ready.push_back(*it);
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
    }
    cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
    for (const Pending& p : ready) {
      if (wait) cudaEventSynchronize(p.done->event);
      EventPool::Get().Release(p.done);
      pool_.Free(p.block);
    }
    return !ready.empty();
  }

  const Device device_;
  PooledStorage pool_;
  mutable SpinLock mu_;
  std::deque<Pending> pending_ WEFT_GUARDED_BY(mu_);
};

bool IsPageable(const void* host) {
  cudaPointerAttributes attrs{};
  if (cudaPointerGetAttributes(&attrs, host) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return attrs.type == cudaMemoryTypeUnregistered;
}

struct HostCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

// One GPU's memory. Copies with pageable host memory go through pinned staging buffers, so that
// neither direction waits on the CPU: host-to-device copies the data into pinned memory and queues
// the DMA; device-to-host queues the DMA into pinned memory and then, on the stream, a host
// function that copies it out. Each staging buffer is freed in stream order.
class GpuStorage final : public StreamOrderedStorage {
 public:
  explicit GpuStorage(Device device)
      : StreamOrderedStorage(device, std::make_unique<CudaRawAllocator>(device.id)) {}

  void Copy(void* dst, const void* src, size_t bytes, GpuStream* stream) override {
    if (bytes == 0) return;
    GpuStream& s = StreamFor("Copy", stream);
    Storage& pinned = *PinnedHostStorage();
    if (IsPageable(src)) {
      const Block staging = pinned.Alloc(bytes);
      std::memcpy(staging.ptr, src, bytes);
      s.Copy(dst, staging.ptr, bytes);
      pinned.FreeAfter(staging, &s);
    } else if (IsPageable(dst)) {
      const Block staging = pinned.Alloc(bytes);
      s.Copy(staging.ptr, src, bytes);
      try {
        CopyOutOnStream(s, HostCopy{dst, staging.ptr, bytes});
      } catch (...) {
        pinned.FreeAfter(staging, &s);
        throw;
      }
      pinned.FreeAfter(staging, &s);
    } else {
      s.Copy(dst, src, bytes);
    }
  }

  void Zero(void* dst, size_t bytes, GpuStream* stream) override {
    if (bytes == 0) return;
    StreamFor("Zero", stream).Memset(dst, 0, bytes);
  }

 private:
  GpuStream& StreamFor(const char* what, GpuStream* stream) const {
    WEFT_CHECK(stream != nullptr) << what << " on " << device()
                                  << ": expected a GPU op's stream, found none";
    return *stream;
  }

  // Queues, on `s`, a host function that copies `copy` out (from pinned staging memory).
  static void CopyOutOnStream(GpuStream& s, const HostCopy& copy) {
    auto* pending = new HostCopy(copy);
    try {
      s.HostFunc(
          [](void* c) {
            auto* h = static_cast<HostCopy*>(c);
            std::memcpy(h->dst, h->src, h->bytes);
            delete h;
          },
          pending);
    } catch (...) {
      delete pending;
      throw;
    }
  }
};

}  // namespace

Storage* PinnedHostStorage() {
  static NoDestructor<StreamOrderedStorage> pinned(
      Device::Cpu(), std::make_unique<PinnedRawAllocator>(), "pinned host");
  return pinned.get();
}

namespace {
[[maybe_unused]] const bool registered = [] {
  RegisterStorageFactory(DeviceType::kGpu, [](Device device) -> std::unique_ptr<Storage> {
    CheckGpu(device.id);
    return std::make_unique<GpuStorage>(device);
  });
  return true;
}();
}  // namespace

}  // namespace weft::gpu
