// What a GPU op cannot go below, for gpu_bench's launch-overhead row: the same tiny kernel
// launched straight from this thread onto one stream, and an empty GPU op pushed through the
// engine (no kernel), each in microseconds per call over 10,000 calls.
#pragma once

namespace bench {

// `blocking_stream`: a stream that synchronizes with the legacy default stream (as weft's
// workers' are) or a non-blocking one.
double RawLaunchUs(int reps, bool blocking_stream);
// The same kernel through the driver API (cuLaunchKernel on its CUfunction).
double DriverLaunchUs(int reps);
double EmptyEngineOpUs(int reps);

// Per kernel node of a chain of `nodes` tiny kernels as a CUDA graph: built and instantiated each
// time; built and used to update one cached executable graph; the cached one replayed.
struct GraphCosts {
  double instantiate_us, update_us, replay_us;
};
GraphCosts GraphLaunchUs(int reps, int nodes);

}  // namespace bench
