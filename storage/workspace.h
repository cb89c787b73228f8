// Temporary workspace for ops: each engine worker (on the CPU, each worker thread) owns one
// buffer that grows on demand and is reused by every op it runs. Ops on one worker never overlap,
// so they share it safely; ops on different workers never wait for each other because of it.
//
//   float* tmp = static_cast<float*>(Workspace::ForThisThread().Get(n * sizeof(float)));
#pragma once

#include <cstddef>

#include "storage/storage.h"

namespace weft {

class Workspace {
 public:
  // The calling thread's CPU workspace.
  static Workspace& ForThisThread();
  ~Workspace();
  // At least `bytes`, valid until the next Get on this workspace. Grows by reallocating.
  void* Get(size_t bytes);
  size_t capacity() const { return block_.size; }

 private:
  Block block_;
};

}  // namespace weft
