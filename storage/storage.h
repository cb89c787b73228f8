// Storage: pooled memory for one device. Sizes are rounded up into size classes (four per power
// of two, so at most 25% is wasted); a freed block goes back to its class's free list and is
// handed out again; ReleaseCache returns every cached block to the system. Statistics say how
// many bytes are in use, how many are cached, and the peak in use.
//
//   Storage& cpu = *Storage::Get(Device::Cpu());
//   Block b = cpu.Alloc(1 << 20);     // 64-byte aligned (what oneDNN wants)
//   cpu.Free(b);                       // cached for the next Alloc of that class
//   cpu.Stats().bytes_in_use == 0
//
// A GPU build registers a factory for DeviceType::kGpu (and a pinned-host pool) at start-up.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "core/device.h"

namespace weft {

namespace engine {
class GpuStream;  // a GPU op's stream (engine/gpu/gpu_stream.h); the engine's, not storage's
}  // namespace engine

struct Block {
  void* ptr = nullptr;
  size_t size = 0;  // the size class actually reserved (>= what was asked)
  Device device;
};

struct StorageStats {
  size_t bytes_in_use = 0;       // handed out and not yet freed (size-class bytes)
  size_t bytes_cached = 0;       // freed and kept for reuse
  size_t peak_bytes_in_use = 0;  // since the process started or ResetPeak()
  size_t allocations = 0;        // Alloc calls
  size_t reuses = 0;             // Alloc calls served from the cache
};

class Storage {
 public:
  virtual ~Storage() = default;
  // The pool of `device`, created on first use and never destroyed (it outlives every engine
  // op that frees memory at exit). Throws weft::Error for a device this build cannot reach.
  static Storage* Get(Device device);

  // A block of at least `bytes` (0 gives an empty block). Throws weft::Error, with the size and
  // the bytes in use and cached, when memory runs out even after releasing the cache.
  virtual Block Alloc(size_t bytes) = 0;
  virtual void Free(Block block) = 0;
  // Frees `block` once the device work queued on `stream` so far is done (stream-ordered free:
  // a GPU op's memory goes back while its kernels may still run; a null stream on a GPU: after
  // the work queued so far on every stream, as Free). Host pools free at once.
  virtual void FreeAfter(Block block, engine::GpuStream* stream) { Free(block); }
  // Copies `bytes` between memory of this device and memory of this device or the host, queued
  // on `stream` (a GPU op's stream, required for a GPU's pool; null on the CPU, where it is done
  // at once). Zero likewise.
  virtual void Copy(void* dst, const void* src, size_t bytes, engine::GpuStream* stream);
  virtual void Zero(void* dst, size_t bytes, engine::GpuStream* stream);
  virtual void ReleaseCache() = 0;
  virtual StorageStats Stats() const = 0;
  virtual void ResetPeak() = 0;
};

// The size class of a request: at least 64 bytes, four classes per power of two.
size_t StorageSizeClass(size_t bytes);

// For device backends: makes Storage::Get(Device{type, id}) return factory(device).
void RegisterStorageFactory(DeviceType type,
                            std::function<std::unique_ptr<Storage>(Device)> factory);

}  // namespace weft
