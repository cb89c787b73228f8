// GpuStream: a CUDA stream together with the rules weft keeps on it, and the only way GPU code
// queues work there. A GPU op gets its worker's stream as RunContext::stream and does everything
// through it: kernels, copies, memsets, host functions, events, and library calls (cuBLAS, cuDNN,
// cuBLASLt) made with the raw stream inside Library. Small kernels are batched into CUDA graphs
// (engine/gpu/launch_batch.h); every operation that is not a kernel launch first launches the
// kernels batched so far, so it follows them on the stream as its caller queued it. No op has to
// remember to flush.
//
//   void ReluGpu(const OpContext& ctx, ...) {
//     engine::GpuStream& stream = *ctx.run.stream;
//     stream.Launch(kernel, grid, block, args);                  // batched
//     stream.Copy(y, x, bytes, cudaMemcpyDeviceToDevice);        // after the kernel
//     stream.Library([&](cudaStream_t s) { WEFT_CUBLAS_CHECK(cublasLtMatmul(..., s)); });
//   }
//
// Who uses a stream, and why its unlocked parts are safe:
//   - Each stream has one owner at a time: the engine worker it was made for (threaded engine:
//     a worker never changes stream, and no other worker runs ops on it), or the naive engine's
//     pushing thread (its ops are serialized by the engine's lock), or a test. Only the owner
//     launches, copies, sets memory, makes the stream wait and calls libraries on it.
//   - Other threads may Record an event on it and Flush it: a consumer on another stream or the
//     CPU records a producer's completion event lazily (engine/gpu/stream_point.h), and work on
//     the legacy stream flushes every stream (RecordAfterAll). The launch batch's mutex orders
//     these with the owner's launches; cudaEventRecord is thread-safe.
//   - id() and device() never change. A stream is destroyed only when no other thread can use
//     it: the engine destroys its streams after draining its ops.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>

#include "core/spin_lock.h"
#include "engine/engine.h"
#include "engine/gpu/device_error.h"
#include "engine/gpu/launch_batch.h"

namespace weft::engine {

class GpuStream {
 public:
  struct Options {
    // A blocking stream (cudaStreamDefault) orders with the legacy default stream, which a free
    // without a stream relies on (storage/gpu/gpu_storage.cc: after the work of every blocking
    // stream); the engine's streams are blocking. A non-blocking one (cudaStreamNonBlocking) does
    // not.
    bool blocking = true;
    int priority = 0;  // as cudaStreamCreateWithPriority takes it (lower is more urgent)
    // A stream that work is captured on into a CUDA graph (engine/gpu/recorded_work.h): its
    // kernels are launched at once (the graph is their batch), and ErrorSlot refuses, since a
    // check's record is reused after the op that used it completes and a replay would write it.
    bool recording = false;
  };

  // A new stream on `device` (made current for the call). Throws weft::Error on a CUDA error.
  explicit GpuStream(int device) : GpuStream(device, Options{}) {}
  GpuStream(int device, Options options);
  // Launches what is batched, waits for the stream's work and destroys it. Errors are dropped:
  // a device fault was reported by the op that caused it.
  ~GpuStream();
  GpuStream(const GpuStream&) = delete;
  GpuStream& operator=(const GpuStream&) = delete;

  int device() const { return device_; }
  bool recording() const { return recording_; }  // Options::recording
  // A small id, unique among live streams (0..63; -1 once 64 are alive): the bit of this stream
  // in StreamPoint::waited_by. Reused after the stream is destroyed, which is safe because the
  // destructor waited for the stream's work: every event it waited for had completed, so a new
  // stream that inherits the bit only skips waits for work that is done.
  int id() const { return handle_.id; }
  // The CUDA stream itself, to name it (the profiler's device tracks). Queue nothing on it: work
  // goes through this object (Library for library calls).
  cudaStream_t handle() const { return handle_.stream; }

  // Launches a kernel (a function pointer or a cudaKernel_t cast to it) with `args` (one pointer
  // per kernel parameter, values copied before this returns), or adds it to the stream's batch.
  // The stream's device must be current (it is on the stream's worker). Throws weft::Error when
  // the kernel has fewer parameters than `args`, or for a failed launch (of this kernel, or kept
  // from an earlier batch).
  void Launch(const void* kernel, dim3 grid, dim3 block, std::span<void* const> args,
              size_t shared_bytes = 0) {
    batch_.Launch(kernel, grid, block, args, shared_bytes);
  }

  // Each of these first launches the kernels batched so far. All throw weft::Error on a CUDA
  // error (the failure of a batched launch included).
  void Copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind = cudaMemcpyDefault);
  void Copy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
              size_t height, cudaMemcpyKind kind = cudaMemcpyDefault);
  void Memset(void* dst, int value, size_t bytes);
  // fn(data) on a CUDA thread once the work before it is done; the stream's later work waits for
  // it to return. fn must make no CUDA call.
  void HostFunc(cudaHostFn_t fn, void* data);
  // Any thread (see the file comment).
  void Record(cudaEvent_t event);
  // The stream's later work waits for `event`. No flush: a wait queued before kernels still
  // batched only makes them wait longer, never less.
  void Wait(cudaEvent_t event);
  // Runs `call(raw_stream)` after the kernels batched so far, for a library call queued on the
  // raw stream or for binding a library handle to it, and returns what it returns. A handle
  // bound inside must be used at once, before anything else is launched through this object: a
  // kernel launched between would still be batched when the library call is queued.
  template <typename F>
  decltype(auto) Library(F&& call) {
    Flush();
    return std::forward<F>(call)(handle_.stream);
  }

  // Launches the kernels batched so far. Any thread.
  void Flush() { batch_.Flush(); }
  // The same from the worker's idle hook: a failure is kept for the next Flush.
  void FlushWhenIdle() noexcept { batch_.FlushWhenIdle(); }
  // Blocks until the stream's work is done.
  void Synchronize();

  // A slot for the op running now to check an input in (engine/gpu/device_error.h): its kernels
  // note bad items there, then the op queues ReportFirstBad on this stream, and the op's
  // completion raises `message(item, value)` at the waits on its outputs. Owner only. Throws
  // weft::Error on a CUDA error. Not for an async GPU op (PushAsync): its completion, recorded
  // when it completes, would take the slots of the ops its worker ran meanwhile too.
  // Throws weft::Error on a recording stream (Options::recording).
  gpu::DeviceErrorSlot ErrorSlot(gpu::DeviceErrorMessage message);
  // The records of the slots handed out since the last call: the completion of the op that used
  // them takes them (a test that runs an op's compute itself, after Synchronize). Any thread.
  gpu::DeviceErrors TakeErrors();

  // Records `event` on the legacy default stream after launching every stream's batch: it
  // completes once all work queued so far on the device's blocking streams has (the current
  // device's, which must be the event's).
  static void RecordAfterAll(cudaEvent_t event);

 private:
  // The CUDA stream and its id, released last (after the batch, whose flushes name the stream).
  struct Handle {
    Handle(int device, Options options);
    ~Handle();
    cudaStream_t stream = nullptr;
    int id = -1;
  };

  const int device_;
  const bool recording_;
  Handle handle_;
  gpu::LaunchBatch batch_;
  SpinLock errors_mu_;
  gpu::DeviceErrors errors_ WEFT_GUARDED_BY(errors_mu_);
};

}  // namespace weft::engine
