// Temporary workspace for ops: each engine worker owns one buffer that grows on demand and is
// reused by every op it runs. On the CPU the buffer is the worker thread's; on a GPU it is the
// worker's stream's. Ops on one worker (one stream) never overlap, or are ordered by the stream,
// so they share it safely; ops on different workers never wait for each other because of it. A
// GPU workspace that grows frees its old buffer in stream order (after the work queued on it).
// Work recorded into a CUDA graph (engine/device_backend.h) gets a workspace of its own instead,
// which keeps every buffer it handed out, since each replay writes them all.
//
//   float* tmp = static_cast<float*>(Workspace::For(ctx.run).Get(n * sizeof(float)));
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "storage/storage.h"

namespace weft {

class Workspace {
 public:
  // The calling thread's CPU workspace.
  static Workspace& ForThisThread();
  // The workspace of the worker running an op: its thread's on the CPU, its stream's on a GPU.
  static Workspace& For(const engine::RunContext& run);
  // A workspace for recorded work on `device`: growing keeps the old buffer, and every buffer lives
  // until the workspace is destroyed, which its owner does once no replay's work is pending.
  static std::unique_ptr<Workspace> ForRecording(Device device);
  // While alive, For(run) on this thread gives `recording` (made by ForRecording) for GPU work.
  class Scope {
   public:
    explicit Scope(Workspace& recording);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Workspace* previous_;
  };

  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  // At least `bytes`, valid until the next Get on this workspace. Grows by reallocating to what is
  // asked (a step asks the same sizes each time, so it grows only in the first), not beyond: the
  // buffer counts in the pool's peak. A recording's workspace, which keeps what it outgrows, grows
  // by half again.
  void* Get(size_t bytes);
  size_t capacity() const { return block_.size; }

 private:
  Workspace(Device device, engine::GpuStream* stream, bool keep = false)
      : device_(device), stream_(stream), keep_(keep) {}
  const Device device_;
  engine::GpuStream* const stream_;  // null on the CPU and for recorded work
  const bool keep_;                  // ForRecording: outgrown buffers go to kept_
  Block block_;
  std::vector<Block> kept_;
};

}  // namespace weft
