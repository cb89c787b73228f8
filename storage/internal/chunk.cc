#include "storage/internal/chunk.h"

#include "core/error.h"
#include "core/mutex.h"

namespace weft::internal {

Chunk::Chunk(size_t bytes, Device device)
    : bytes_(bytes), device_(device), var_(engine::Engine::Get()->NewVariable()) {
  Storage::Get(device);  // a device this build cannot reach fails here, not inside an op
}

void* Chunk::data() {
  if (void* p = data_.load(std::memory_order_acquire)) return p;
  MutexLock lock(&alloc_mu_);
  if (block_.ptr == nullptr && bytes_ > 0) {
    block_ = Storage::Get(device_)->Alloc(bytes_);
    data_.store(block_.ptr, std::memory_order_release);
  }
  return block_.ptr;
}

Chunk::~Chunk() {
  // By destruction no one else holds the chunk, so block_ is stable.
  Block block = block_;
  Device device = device_;
  try {
    engine::Engine::Get()->DeleteVariable(
        [block](engine::RunContext run) {
          Storage::Get(block.device)->FreeAfter(block, run.stream);
        },
        device, var_);
  } catch (const Error&) {
    // The engine has shut down (an array that outlives it, e.g. a static): nothing runs any
    // more, so the memory can go back now. The var is the engine's to free.
    Storage::Get(device)->Free(block);
  }
}

}  // namespace weft::internal
