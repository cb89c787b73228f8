#include "ops/gpu/fusion/device_memory.h"

#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

void UploadNow(const DeviceMemory& memory, const void* host, size_t bytes) {
  engine::GpuStream stream(memory.device().id,
                           engine::GpuStream::Options{/*blocking=*/false, /*priority=*/0});
  Storage::Get(memory.device())->Copy(memory.data(), host, bytes, &stream);
  stream.Synchronize();
}

}  // namespace weft::gpu
