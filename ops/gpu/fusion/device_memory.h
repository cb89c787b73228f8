// Device memory that fused kernels use without an engine var of their own (a kernel's argument
// table, the fallback's scratch values), owned here. It goes back to the device's pool after all
// the work queued so far on the device's blocking streams (Storage::Free without a stream), so
// whichever worker's stream used it last is done with it first: no op declares it, so the
// engine could not order its free.
//
//   DeviceMemory table(Device::Gpu(0), bytes);
//   UploadNow(table, host.data(), bytes);   // done when it returns
#pragma once

#include <cstddef>
#include <utility>

#include "core/device.h"
#include "storage/storage.h"

namespace weft::gpu {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(Device device, size_t bytes) : block_(Storage::Get(device)->Alloc(bytes)) {}
  ~DeviceMemory() {
    if (block_.ptr != nullptr) Storage::Get(block_.device)->Free(block_);
  }
  DeviceMemory(DeviceMemory&& other) noexcept : block_(std::exchange(other.block_, Block{})) {}
  DeviceMemory& operator=(DeviceMemory&& other) noexcept {
    std::swap(block_, other.block_);
    return *this;
  }

  void* data() const { return block_.ptr; }
  Device device() const { return block_.device; }

 private:
  Block block_;
};

// Copies `bytes` from the host into `memory` and waits for that copy alone (on a stream of its
// own): for data prepared once, outside any engine op.
void UploadNow(const DeviceMemory& memory, const void* host, size_t bytes);

}  // namespace weft::gpu
