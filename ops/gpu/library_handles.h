// cuDNN and cuBLAS handles for GPU operators, one per (thread, stream, device), bound to that
// stream; and the checks that turn a failed cuDNN or cuBLAS call into a weft::Error. Compiled
// only by --config=cuda.
//
//   engine::GpuStream& stream = *ctx.run.stream;
//   WEFT_CUDNN_CHECK(WithCudnn(stream, [&](cudnnHandle_t h) { return cudnnSoftmaxForward(h, ...);
//   })); WEFT_CUBLAS_CHECK(WithCublas(stream, [&](cublasHandle_t h) { return cublasGemmEx(h, ...);
//   }));
//
// A handle is only ever lent for the scope of one call, inside the stream object's
// GpuStream::Library, which first launches the kernels batched on the stream: the library call
// follows them, and nothing can be launched through the stream between binding the handle and
// using it (a kernel launched there would still be batched when the library's work is queued).
//
// A handle is used by one thread at a time: the thread that got it. An engine worker's stream
// never changes, so a worker holds one handle per library; a thread that runs GPU ops on several
// streams (the naive engine, one stream per device) holds one per stream.
//
// Lifetime: handles are created on first use and never destroyed. When a thread exits, the
// handles it held go back to a process-wide pool per device (no CUDA call is made), and the next
// thread that needs one takes it from there and binds it to its own stream. So their number stays
// bounded by the threads alive at once, and no CUDA or library call ever runs from a thread_local
// or static destructor, whatever the order in which threads, the engine and the CUDA runtime go
// away at exit. (Destroying them at engine shutdown would save a few MiB per handle for a
// process that keeps running without the GPU; nothing needs that yet.)
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <utility>

#include "core/error.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

// The calling thread's handle for raw stream `stream` of GPU `device`, bound to it. Only for
// use inside GpuStream::Library, which is what WithCudnn and WithCublas do.
cudnnHandle_t CudnnHandleFor(int device, cudaStream_t stream);
cublasHandle_t CublasHandleFor(int device, cudaStream_t stream);

// Runs fn(handle), with the calling thread's handle bound to `stream`, after the kernels batched
// on it so far; returns what fn returns (a status, for WEFT_CUDNN_CHECK / WEFT_CUBLAS_CHECK).
// fn makes the library calls and launches nothing through `stream`.
template <typename F>
decltype(auto) WithCudnn(engine::GpuStream& stream, F&& fn) {
  return stream.Library([&](cudaStream_t s) -> decltype(auto) {
    return std::forward<F>(fn)(CudnnHandleFor(stream.device(), s));
  });
}
template <typename F>
decltype(auto) WithCublas(engine::GpuStream& stream, F&& fn) {
  return stream.Library([&](cudaStream_t s) -> decltype(auto) {
    return std::forward<F>(fn)(CublasHandleFor(stream.device(), s));
  });
}

// Throw weft::Error "<file>:<line>: cuDNN error: <call>: <status string>" (and the same for
// cuBLAS, with the status name and its description).
[[noreturn]] void ThrowCudnnError(cudnnStatus_t status, const char* call, const char* file,
                                  int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* call, const char* file,
                                   int line);

}  // namespace weft::gpu

#define WEFT_CUDNN_CHECK(call)                                                     \
  do {                                                                             \
    const cudnnStatus_t weft_cudnn_status_ = (call);                               \
    if (weft_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                              \
      ::weft::gpu::ThrowCudnnError(weft_cudnn_status_, #call, __FILE__, __LINE__); \
    }                                                                              \
  } while (0)

#define WEFT_CUBLAS_CHECK(call)                                                      \
  do {                                                                               \
    const cublasStatus_t weft_cublas_status_ = (call);                               \
    if (weft_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                              \
      ::weft::gpu::ThrowCublasError(weft_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
