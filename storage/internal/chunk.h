// The memory behind one or more NDArrays (an array and its views), with its engine variable.
#pragma once

#include <atomic>
#include <mutex>

#include "core/mutex.h"
#include "engine/engine.h"
#include "storage/storage.h"

namespace weft::internal {

class Chunk {
 public:
  Chunk(size_t bytes, Device device);
  // Frees the memory after every op pushed on the var (DeleteVariable); at exit, once the
  // engine has shut down, frees it at once.
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  // The memory, allocated on the first call. Thread-safe.
  void* data();
  engine::VarHandle var() const { return var_; }
  Device device() const { return device_; }
  size_t bytes() const { return bytes_; }

 private:
  const size_t bytes_;
  const Device device_;
  const engine::VarHandle var_;
  // The memory: data_ is published (release) once block_ is set, under alloc_mu_.
  std::atomic<void*> data_{nullptr};
  Mutex alloc_mu_;
  Block block_;
};

}  // namespace weft::internal
