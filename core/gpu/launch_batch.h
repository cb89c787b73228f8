// Kernel launches batched per stream into CUDA graphs. Launching a kernel costs the host several
// microseconds (3.7 to 5.1 on the H200 machine, whatever the API), more than a tiny kernel runs;
// a chain of kernel nodes in a graph costs about 1.2 per node. So each stream collects the
// kernels launched on it as a chain of graph nodes, and launches the chain as one graph when:
//   - anything else is about to be queued on the stream: every such place in weft calls
//     FlushLaunches first (event records, copies, memsets, library calls through the library
//     handles, stream synchronization, stream destruction);
//   - the chain reaches kMaxBatch kernels (64; 256 measured no better);
//   - the stream's worker runs out of work (the engine's idle hook).
// Waits (cudaStreamWaitEvent) need no flush: one queued before pending kernels of earlier ops
// only makes them wait longer. Executable graphs are kept per stream and chain length and
// updated in place (cudaGraphExecUpdate), which is cheap; only a new length instantiates.
// WEFT_GPU_LAUNCH_BATCH=0 launches every kernel at once instead.
//
//   LaunchKernel(kernel, grid, block, args, 0, stream);   // queued in the stream's batch
//   FlushLaunches(stream);                                // before cudaMemcpyAsync(..., stream)
#pragma once

#include <cuda_runtime.h>

namespace weft::gpu {

inline constexpr int kMaxBatch = 64;

// Launches `kernel` (a function pointer or a cudaKernel_t cast to it) on `stream`, or adds it to
// the stream's batch. `args` are copied before this returns.
void LaunchKernel(const void* kernel, dim3 grid, dim3 block, void** args, size_t shared_bytes, cudaStream_t stream);

// Launches the kernels batched for `stream` so far (nothing when there are none). Thread-safe:
// any thread about to queue work on a stream may call it.
void FlushLaunches(cudaStream_t stream);

// Forgets `stream`'s batch state (after a flush), before the stream is destroyed.
void ForgetStream(cudaStream_t stream);

}  // namespace weft::gpu
