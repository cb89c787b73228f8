// Kernel launches batched per stream into CUDA graphs. Launching a kernel costs the host several
// microseconds (3.7 to 5.4 on the H200 machine, whatever the API), more than a tiny kernel runs;
// a chain of kernel nodes in a graph costs about 1.2 per node. So each stream collects the
// kernels launched on it (their arguments copied), and launches them as one chain graph when:
//   - anything else is about to be queued on the stream: every such place in weft calls
//     FlushLaunches first (event records, copies, memsets, library calls through the library
//     handles, stream synchronization, stream destruction);
//   - the chain reaches kMaxBatch kernels (64; 256 measured no better);
//   - the stream's worker runs out of work (the engine's idle hook).
// A large kernel (kDirectLaunchThreads threads or more) is launched at once, after the chain: it
// runs longer than a launch costs, so batching it gains nothing and would only delay it.
// Waits (cudaStreamWaitEvent) need no flush: one queued before pending kernels of earlier ops
// only makes them wait longer. Executable chains are kept per stream and length; a flush sets
// each node's kernel and arguments (cudaGraphExecKernelNodeSetParams, about 0.35 us a node; it
// leaves launches already queued alone) and launches the chain: cheaper than building a graph
// (about 0.5 to 0.9 us a node). A node whose kernel, configuration and argument bytes are those
// it already holds (a loop's steady state) is not set again. Only a new length instantiates. A
// launch that fails is kept and raised by the stream's next flush, so an error the idle hook met
// is not lost.
// WEFT_GPU_LAUNCH_BATCH=0 launches every kernel at once instead.
//
//   void* args[] = {&x, &n};
//   LaunchKernel(kernel, grid, block, args, 0, stream);   // queued in the stream's batch
//   FlushLaunches(stream);                                // before cudaMemcpyAsync(..., stream)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace weft::gpu {

inline constexpr int kMaxBatch = 64;
inline constexpr uint64_t kDirectLaunchThreads = uint64_t{1} << 19;

// Launches `kernel` (a function pointer or a cudaKernel_t cast to it) on `stream`, or adds it to
// the stream's batch; the device current on this thread must be the stream's. `args` points at
// each of the kernel's arguments, in order (exactly as many as it has parameters, as for
// cudaLaunchKernel); their values are copied before this returns. Throws weft::Error when the
// kernel has fewer parameters than `args`.
void LaunchKernel(const void* kernel, dim3 grid, dim3 block, std::span<void* const> args, size_t shared_bytes,
                  cudaStream_t stream);

// Launches the kernels batched for `stream` so far (nothing when there are none). Thread-safe:
// any thread about to queue work on a stream may call it.
void FlushLaunches(cudaStream_t stream);

// Launches the batch like FlushLaunches, but keeps a failure for the stream's next FlushLaunches
// instead of throwing it (the engine's idle hook: no op to report to).
void FlushLaunchesWhenIdle(cudaStream_t stream) noexcept;

// Forgets `stream`'s batch state (after a flush), before the stream is destroyed.
void ForgetStream(cudaStream_t stream);

// Launches every stream's batch and forgets what names kernels (executable chains, parameter
// sizes), before kernels are unloaded (cudaLibraryUnload): a kernel loaded later may reuse an
// unloaded one's address.
void ForgetKernels() noexcept;

}  // namespace weft::gpu
