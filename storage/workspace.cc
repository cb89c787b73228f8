#include "storage/workspace.h"

namespace weft {

Workspace& Workspace::ForThisThread() {
  thread_local Workspace workspace;
  return workspace;
}

Workspace::~Workspace() { Storage::Get(Device::Cpu())->Free(block_); }

void* Workspace::Get(size_t bytes) {
  if (bytes > block_.size) {
    Storage* pool = Storage::Get(Device::Cpu());
    pool->Free(block_);
    block_ = Block{};
    block_ = pool->Alloc(bytes + bytes / 2);  // headroom so a slowly growing need reallocates rarely
  }
  return block_.ptr;
}

}  // namespace weft
