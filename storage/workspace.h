// Temporary workspace for ops: each engine worker owns one buffer that grows on demand and is
// reused by every op it runs. On the CPU the buffer is the worker thread's; on a GPU it is the
// worker's stream's. Ops on one worker (one stream) never overlap, or are ordered by the stream,
// so they share it safely; ops on different workers never wait for each other because of it. A
// GPU workspace that grows frees its old buffer in stream order (after the work queued on it).
//
//   float* tmp = static_cast<float*>(Workspace::For(ctx.run).Get(n * sizeof(float)));
#pragma once

#include <cstddef>

#include "engine/engine.h"
#include "storage/storage.h"

namespace weft {

class Workspace {
 public:
  // The calling thread's CPU workspace.
  static Workspace& ForThisThread();
  // The workspace of the worker running an op: its thread's on the CPU, its stream's on a GPU.
  static Workspace& For(const engine::RunContext& run);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At least `bytes`, valid until the next Get on this workspace. Grows by reallocating.
  void* Get(size_t bytes);
  size_t capacity() const { return block_.size; }

 private:
  Workspace(Device device, engine::GpuStream* stream) : device_(device), stream_(stream) {}
  const Device device_;
  engine::GpuStream* const stream_;  // null on the CPU
  Block block_;
};

}  // namespace weft
