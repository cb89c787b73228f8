#include "storage/workspace.h"

#include <memory>
#include <vector>

namespace weft {

Workspace& Workspace::ForThisThread() {
  thread_local Workspace workspace(Device::Cpu(), nullptr);
  return workspace;
}

Workspace& Workspace::For(const engine::RunContext& run) {
  if (run.stream == nullptr) return ForThisThread();
  // A worker thread has one stream; the naive engine's calling thread has one per GPU.
  thread_local std::vector<std::unique_ptr<Workspace>> by_stream;
  for (const auto& w : by_stream) {
    if (w->stream_ == run.stream) return *w;
  }
  by_stream.push_back(std::unique_ptr<Workspace>(new Workspace(run.device, run.stream)));
  return *by_stream.back();
}

Workspace::~Workspace() {
  try {
    Storage::Get(device_)->Free(block_);
  } catch (...) {
    // At thread exit a failing device cannot be reported; the memory is the device's anyway.
  }
}

void* Workspace::Get(size_t bytes) {
  if (bytes > block_.size) {
    Storage* pool = Storage::Get(device_);
    pool->FreeAfter(block_, stream_);
    block_ = Block{};
    block_ = pool->Alloc(bytes + bytes / 2);  // headroom so a slowly growing need reallocates rarely
  }
  return block_.ptr;
}

}  // namespace weft
