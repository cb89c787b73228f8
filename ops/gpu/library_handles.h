// cuDNN and cuBLAS handles for GPU operators, one per (thread, stream, device), bound to that
// stream; and the checks that turn a failed cuDNN or cuBLAS call into a weft::Error. Compiled
// only by --config=cuda.
//
//   engine::GpuStream& stream = *ctx.run.stream;
//   WEFT_CUDNN_CHECK(cudnnSoftmaxForward(CudnnHandle(stream), ...));   // bound to the stream
//   WEFT_CUBLAS_CHECK(cublasGemmEx(CublasHandle(stream), ...));
//
// A handle is got through the stream object (GpuStream::Library), which first launches the
// kernels batched on the stream: a library call made with it at once follows them. Anything
// launched through the stream between getting the handle and calling the library would not.
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

#include "core/error.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

// The calling thread's handle for `stream` (on its device), bound to it, after the kernels
// batched on it so far.
cudnnHandle_t CudnnHandle(engine::GpuStream& stream);
cublasHandle_t CublasHandle(engine::GpuStream& stream);

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
