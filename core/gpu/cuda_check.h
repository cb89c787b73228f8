// The CUDA runtime, seen from weft: every CUDA call goes through WEFT_CUDA_CHECK, which turns a
// failure into a weft::Error naming the call, the error and where; and the questions the rest of
// weft asks about GPUs (how many, which architecture). Compiled only by --config=cuda.
//
//   WEFT_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
//   if (GpuCount() == 0) ...          // no driver or no device: 0, never an error
//   DeviceGuard guard(device.id);     // cudaSetDevice for a scope, restored after
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "core/error.h"

namespace weft::gpu {

// Throws weft::Error "<file>:<line>: CUDA error: <call>: <name>: <description>". Also clears a
// non-sticky error so it is not reported twice.
[[noreturn]] void ThrowCudaError(cudaError_t error, const char* call, const char* file, int line);

// The number of usable GPUs: 0 where there is no driver, no device, or the driver is too old
// for this runtime. The first call initializes the runtime; later calls are cheap.
int GpuCount();
// Why GpuCount() is 0, in words ("CUDA driver version is insufficient ..."); empty if it is not.
std::string NoGpuReason();
// Compute capability as major * 10 + minor (90 on an H200). Throws for a device that is absent.
int ComputeCapability(int device);
// Throws weft::Error unless `device` is a GPU this process can use.
void CheckGpu(int device);

// Makes `device` current for the scope, restoring the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace weft::gpu

#define WEFT_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    const cudaError_t weft_cuda_error_ = (call);                                \
    if (weft_cuda_error_ != cudaSuccess) {                                      \
      ::weft::gpu::ThrowCudaError(weft_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                           \
  } while (0)
