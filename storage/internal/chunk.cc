#include "storage/internal/chunk.h"

#include "core/error.h"

namespace weft::internal {

Chunk::Chunk(size_t bytes, Device device)
    : bytes_(bytes), device_(device), var_(engine::Engine::Get()->NewVariable()) {
  Storage::Get(device);  // a device this build cannot reach fails here, not inside an op
}

void* Chunk::data() {
  std::call_once(allocated_, [this] { block_ = Storage::Get(device_)->Alloc(bytes_); });
  return block_.ptr;
}

Chunk::~Chunk() {
  // Whoever calls data() did so under allocated_; by destruction no one else holds the chunk.
  Block block = block_;
  Device device = device_;
  try {
    engine::Engine::Get()->DeleteVariable(
        [block](engine::RunContext) { Storage::Get(block.device)->Free(block); }, device, var_);
  } catch (const Error&) {
    // The engine has shut down (an array that outlives it, e.g. a static): nothing runs any
    // more, so the memory can go back now. The var is the engine's to free.
    Storage::Get(device)->Free(block);
  }
}

}  // namespace weft::internal
