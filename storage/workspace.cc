#include "storage/workspace.h"

#include <memory>
#include <utility>
#include <vector>

namespace weft {

Workspace& Workspace::ForThisThread() {
  thread_local Workspace workspace(Device::Cpu(), nullptr);
  return workspace;
}

namespace {
thread_local Workspace* recording_scope = nullptr;  // Workspace::Scope's
}  // namespace

std::unique_ptr<Workspace> Workspace::ForRecording(Device device) {
  return std::unique_ptr<Workspace>(new Workspace(device, nullptr, /*keep=*/true));
}

Workspace::Scope::Scope(Workspace& recording)
    : previous_(std::exchange(recording_scope, &recording)) {}
Workspace::Scope::~Scope() { recording_scope = previous_; }

Workspace& Workspace::For(const engine::RunContext& run) {
  if (run.stream == nullptr) return ForThisThread();
  if (recording_scope != nullptr) return *recording_scope;
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
    Storage* pool = Storage::Get(device_);
    for (Block& b : kept_) pool->Free(b);
    pool->Free(block_);
  } catch (...) {
    // At thread exit a failing device cannot be reported; the memory is the device's anyway.
  }
}

void* Workspace::Get(size_t bytes) {
  if (bytes > block_.size) {
    Storage* pool = Storage::Get(device_);
    if (keep_) {
      if (block_.ptr != nullptr) kept_.push_back(block_);
    } else {
      pool->FreeAfter(block_, stream_);
    }
    block_ = Block{};
    block_ = pool->Alloc(keep_ ? bytes + bytes / 2 : bytes);
  }
  return block_.ptr;
}

}  // namespace weft
