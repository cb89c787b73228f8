// STOPGAP until the NVRTC kernel library (branch `rtc`) is merged: compiles CUDA source with
// NVRTC for the GPU found, loads the cubin and launches its kernels. Its one user is
// softmax_cross_entropy.cc, whose kernel source is kept apart in one function (SceKernelSource)
// so that it can move onto that library, and this file be deleted.
//
//   const void* k = RtcKernel("sce", SceKernelSource(), "sce_loss_float", device);
//   LaunchRtc(k, n, args, stream);
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::gpu {

// Kernel `kernel` (an extern "C" name) of `source`, compiled for `device`'s architecture (sm_90
// on an H200). Each (source name, architecture) is compiled and loaded once and kept for the
// process, never unloaded (no CUDA call at exit, as for the library handles). Throws weft::Error
// with NVRTC's log when the source does not compile.
const void* RtcKernel(const char* source_name, const char* source, const char* kernel, int device);

// Launches `kernel` over `threads` threads, 1-D in blocks of 256, on `stream`; `args` points at
// each kernel argument, in order, with the kernel's exact parameter types.
void LaunchRtc(const void* kernel, int64_t threads, void** args, cudaStream_t stream);

}  // namespace weft::gpu
