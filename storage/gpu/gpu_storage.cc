#include "storage/gpu/gpu_storage.h"

#include <cuda_runtime.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "core/gpu/cuda_check.h"
#include "core/gpu/launch_batch.h"
#include "core/spin_lock.h"
#include "engine/gpu/event_pool.h"
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
    if (error != cudaSuccess) ThrowCudaError(error, "cudaHostAlloc(&ptr, bytes)", __FILE__, __LINE__);
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override { cudaFreeHost(ptr); }
};

// The device of `stream` (cudaStreamLegacy: the current device), for the events of its frees.
int DeviceOf(cudaStream_t stream) {
  int device = 0;
  if (stream == cudaStreamLegacy || stream == nullptr) {
    WEFT_CUDA_CHECK(cudaGetDevice(&device));
  } else {
    WEFT_CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  }
  return device;
}

// A pooled allocator whose frees are stream-ordered: a block freed with FreeAfter stays reserved
// until the event recorded on the stream at that moment has completed; Alloc reclaims finished
// ones first, and, out of memory, waits for all of them and tries once more.
class StreamOrderedStorage : public Storage {
 public:
  StreamOrderedStorage(Device device, std::unique_ptr<RawAllocator> raw) : device_(device), pool_(device, std::move(raw)) {}

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
  void Free(Block block) override { FreeAfter(block, cudaStreamLegacy); }

  void FreeAfter(Block block, void* stream) override {
    if (block.ptr == nullptr) return;
    WEFT_CHECK(block.device == device_) << "a block of " << block.device << " freed to the pool of " << device_;
    const auto s = static_cast<cudaStream_t>(stream);
    PooledEvent* done = EventPool::Get().Record(device_.is_gpu() ? device_.id : DeviceOf(s), s);
    std::lock_guard<SpinLock> lock(mu_);
    pending_.push_back({block, done});
  }

  void ReleaseCache() override {
    Reclaim(/*wait=*/true);
    pool_.ReleaseCache();
  }

  // Blocks waiting for their stream count as in use until they are reclaimed.
  StorageStats Stats() const override { return pool_.Stats(); }
  void ResetPeak() override { pool_.ResetPeak(); }

 private:
  struct Pending {
    Block block;
    PooledEvent* done;
  };

  // Returns finished pending blocks to the pool (with `wait`, all of them); true if any came back.
  bool Reclaim(bool wait) {
    std::deque<Pending> ready;
    {
      std::lock_guard<SpinLock> lock(mu_);
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
  std::deque<Pending> pending_;  // guarded by mu_
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
  explicit GpuStorage(Device device) : StreamOrderedStorage(device, std::make_unique<CudaRawAllocator>(device.id)) {}

  void Copy(void* dst, const void* src, size_t bytes, void* stream) override {
    if (bytes == 0) return;
    const auto s = static_cast<cudaStream_t>(stream);
    FlushLaunches(s);
    Storage& pinned = *PinnedHostStorage();
    if (IsPageable(src)) {
      const Block staging = pinned.Alloc(bytes);
      std::memcpy(staging.ptr, src, bytes);
      WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, staging.ptr, bytes, cudaMemcpyDefault, s));
      pinned.FreeAfter(staging, stream);
    } else if (IsPageable(dst)) {
      const Block staging = pinned.Alloc(bytes);
      WEFT_CUDA_CHECK(cudaMemcpyAsync(staging.ptr, src, bytes, cudaMemcpyDefault, s));
      auto* copy = new HostCopy{dst, staging.ptr, bytes};
      const cudaError_t error = cudaLaunchHostFunc(
          s,
          [](void* c) {
            auto* h = static_cast<HostCopy*>(c);
            std::memcpy(h->dst, h->src, h->bytes);
            delete h;
          },
          copy);
      if (error != cudaSuccess) delete copy;
      pinned.FreeAfter(staging, stream);
      if (error != cudaSuccess) ThrowCudaError(error, "cudaLaunchHostFunc(stream, copy out)", __FILE__, __LINE__);
    } else {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    }
  }

  void Zero(void* dst, size_t bytes, void* stream) override {
    if (bytes == 0) return;
    FlushLaunches(static_cast<cudaStream_t>(stream));
    WEFT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)));
  }
};

}  // namespace

Storage* PinnedHostStorage() {
  static Storage* pinned = new StreamOrderedStorage(Device::Cpu(), std::make_unique<PinnedRawAllocator>());
  return pinned;
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
