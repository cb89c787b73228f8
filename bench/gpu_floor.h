// What a GPU op cannot go below, for gpu_bench's launch-overhead row: the same tiny kernel
// launched straight from this thread onto one stream, and an empty GPU op pushed through the
// engine (no kernel), each in microseconds per call over 10,000 calls; and a stream of the
// benchmark's own with a kernel spinning on it, for the RNN join's cost.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

// Microseconds per call of `fn` over `n` calls, with `wait` before and after each repetition;
// the median over `reps` repetitions.
template <typename Fn>
double MedianUs(int reps, int n, Fn&& fn, void (*wait)()) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn();
    wait();
    times.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        n);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// `blocking_stream`: a stream that synchronizes with the legacy default stream (as weft's
// workers' are) or a non-blocking one.
double RawLaunchUs(int reps, bool blocking_stream);
// The same kernel through the driver API (cuLaunchKernel on its CUfunction).
double DriverLaunchUs(int reps);
double EmptyEngineOpUs(int reps);

// Per kernel node of a chain of `nodes` tiny kernels as a CUDA graph: built and destroyed (host
// only); built and instantiated each time; built and used to update one cached executable graph;
// the cached one with each node's parameters set again (cudaGraphExecKernelNodeSetParams); the
// parameters set alone (host only); the cached one replayed.
struct GraphCosts {
  double build_us, instantiate_us, update_us, set_params_us, set_params_host_us, replay_us;
};
GraphCosts GraphLaunchUs(int reps, int nodes);

// GB/s (bytes read plus written) of weft's relu kernel alone on 64M floats, launched straight onto
// a stream and timed with CUDA events, with `blocks` blocks of 256 threads; and of a device-to-
// device cudaMemcpyAsync of the same size (blocks ignored).
double KernelOnlyGbs(int reps, unsigned blocks, bool copy);

// A stream of the benchmark's own (blocking: it synchronizes with the legacy default stream, as
// weft's workers' streams do; or non-blocking) with one block spinning for `ms` milliseconds on
// it, queued at construction; the destructor waits for it. What the RNN's legacy-stream join
// costs: it waits for work queued on every blocking stream of the device, this one's included.
class SpinningStream {
 public:
  SpinningStream(bool blocking, double ms);
  ~SpinningStream();
  SpinningStream(const SpinningStream&) = delete;
  SpinningStream& operator=(const SpinningStream&) = delete;

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace bench
