// The profiler's device tracer on NVIDIA GPUs (engine/profiler_hooks.h), over CUPTI's activity
// API, registered at start-up by the CUDA build; and how the launch batches (launch_batch.h) tell
// it which op each kernel of a batch came from.
//
// While it records, CUPTI reports every kernel, memcpy and memset with its device, stream, start
// and end (measured on the GPU and converted by CUPTI to host time, which it takes from the
// profiler's clock through a timestamp callback), and the correlation id of the API call that
// queued it. Each piece of work is attributed to the op that queued it:
//   - work an op's function queues itself (a library call, a copy, a kernel launched at once)
//     carries the op's id as an external correlation id (CUPTI's CUSTOM0), pushed around the
//     function (DeviceTracer::EnterOp);
//   - kernels batched into a chain graph are launched later, in one cudaGraphLaunch, by whichever
//     thread flushes the batch (the next op, the worker's idle hook, a consumer recording an
//     event): the flush pushes a launch id (CUSTOM1) that maps to the ops of the chain's kernels,
//     in order, and the kernels of that launch, sorted by start, are the chain's nodes in order
//     (each node of a chain waits for the one before it); they are shown on the track of the
//     stream the chain was launched into.
//   A launch id wins over an op id: a flush inside op B may launch op A's kernels.
// The executable chains are dropped when the tracer starts and when it stops
// (LaunchBatch::ForgetChains): every graph replayed in a trace was instantiated while CUPTI
// traced, and none instantiated then outlives the trace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace weft::gpu {

// True while the device tracer records. Relaxed: a launch that races with Start or Stop may or
// may not be attributed.
bool TracingDevice();

// For its lifetime, the CUDA calls of the calling thread launch the kernels of `ops`, in order,
// into `stream`: kernel i was queued by op ops[i] (0: by none), and is shown on `stream`'s track.
// Nothing when `ops` is empty or the tracer does not record. One at a time per thread.
class LaunchAttribution {
 public:
  LaunchAttribution(std::span<const uint64_t> ops, cudaStream_t stream);
  ~LaunchAttribution();
  LaunchAttribution(const LaunchAttribution&) = delete;
  LaunchAttribution& operator=(const LaunchAttribution&) = delete;

 private:
  bool active_ = false;
};

}  // namespace weft::gpu
