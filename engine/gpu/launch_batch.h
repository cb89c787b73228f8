// Kernel launches batched per stream into CUDA graphs, for GpuStream (engine/gpu/gpu_stream.h),
// which owns one LaunchBatch and is the only way weft launches kernels on its streams. Launching a
// kernel costs the host more than a tiny kernel runs, and a node of a replayed chain graph costs
// less (`gpu_bench --floors_only=1` prints both; bench/README.md has the figures). So each stream
// collects the kernels launched on it (their arguments copied), and launches them as one chain
// graph when:
//   - anything else is about to be queued on the stream: GpuStream flushes before every copy,
//     memset, host function, event record and library call, before synchronizing and before the
//     stream goes; work on the legacy default stream, which orders after every blocking stream,
//     flushes every stream's batch first (FlushAll);
//   - the chain reaches kMaxBatch kernels (64; 256 was no better in gpu_bench's tiny-op rows);
//   - the stream's worker runs out of work (the engine's idle hook: FlushWhenIdle).
// A large kernel (kDirectLaunchThreads threads or more) is launched at once, after the chain: it
// runs longer than a launch costs, so batching it gains nothing and would only delay it.
// Waits (cudaStreamWaitEvent) need no flush: one queued before pending kernels of earlier ops
// only makes them wait longer. Executable chains are kept per stream and length; a flush sets
// each node's kernel and arguments (cudaGraphExecKernelNodeSetParams; it leaves launches already
// queued alone) and launches the chain: cheaper per node than building a graph (the graph-cost
// rows of `gpu_bench --floors_only=1`). A node whose kernel, configuration and argument bytes are
// those it already holds (a loop's steady state) is not set again. Only a new length instantiates.
// A launch that fails is kept and raised by the stream's next flush, so an error the idle hook met
// is not lost.
// While the profiler's device tracer records, each batched kernel keeps the profiled op that
// launched it, and a flush tells the tracer which op each node of the chain came from
// (engine/gpu/device_tracer.h), so the trace draws an arrow from an op to its replayed kernels.
// WEFT_GPU_LAUNCH_BATCH=0 launches every kernel at once instead.
//
//   LaunchBatch batch(stream, device);
//   void* args[] = {&x, &n};
//   batch.Launch(kernel, grid, block, args, 0);   // queued in the batch
//   batch.Flush();                                // before cudaMemcpyAsync(..., stream)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>

namespace weft::gpu {

inline constexpr int kMaxBatch = 64;
inline constexpr uint64_t kDirectLaunchThreads = uint64_t{1} << 19;

// One stream's pending kernels and executable chains. Registered from construction to
// destruction, so that FlushAll and ForgetKernels reach every live batch.
//
// Threads: Launch is called by the stream's owner only (one thread at a time: the worker that
// owns the stream). Flush, FlushWhenIdle, FlushAll and ForgetKernels may be called from any
// thread (a consumer on another stream records the stream's event lazily; work on the legacy
// stream flushes every batch); a mutex per batch orders them with Launch. FlushAll and
// ForgetKernels find batches through a registry whose lock the destructor takes too, so they never
// see a batch being destroyed; any other thread must be done with the batch's stream before it
// goes (the engine destroys its streams after draining).
class LaunchBatch {
 public:
  // For `stream` of `device`. `batching` false (or WEFT_GPU_LAUNCH_BATCH=0): every kernel is
  // launched at once (a stream being captured into a CUDA graph, which is a batch of its own).
  LaunchBatch(cudaStream_t stream, int device, bool batching = true);
  ~LaunchBatch();  // drops pending kernels (flush first) and frees the chains
  LaunchBatch(const LaunchBatch&) = delete;
  LaunchBatch& operator=(const LaunchBatch&) = delete;

  // Launches `kernel` (a function pointer or a cudaKernel_t cast to it) on the stream, or adds it
  // to the batch; `device` must be current. `args` points at each of the kernel's arguments, in
  // order (exactly as many as it has parameters, as for cudaLaunchKernel); their values are copied
  // before this returns. Throws weft::Error when the kernel has fewer parameters than `args`.
  void Launch(const void* kernel, dim3 grid, dim3 block, std::span<void* const> args,
              size_t shared_bytes);

  // Launches the kernels batched so far (nothing when there are none), then raises a launch
  // failure kept from an earlier flush.
  void Flush();
  // The same, but keeps a failure for the next Flush instead of throwing it (the engine's idle
  // hook: no op to report to).
  void FlushWhenIdle() noexcept;

  // Flushes every live batch (before work on cudaStreamLegacy, which waits for every blocking
  // stream's queued work but cannot see kernels still batched).
  static void FlushAll();
  // Launches every batch and forgets what names kernels (executable chains, parameter sizes),
  // before kernels are unloaded (cudaLibraryUnload): a kernel loaded later may reuse an unloaded
  // one's address.
  static void ForgetKernels() noexcept;
  // Launches every batch and destroys the executable chains, which are rebuilt at their next use
  // (the device tracer: a graph instantiated before CUPTI traced is not traced). Parameter sizes
  // stay known: asking the driver again may wait for the device (lazy loading), and a stream may
  // be held then.
  static void ForgetChains() noexcept;

  struct State;  // defined in launch_batch.cc

 private:
  std::unique_ptr<State> state_;
};

}  // namespace weft::gpu
