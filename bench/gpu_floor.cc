#include "bench/gpu_floor.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "engine/engine.h"
#include "ops/gpu/rtc/kernel_library.h"

namespace bench {

namespace {

template <typename Fn>
double MedianUs(int reps, int n, Fn&& fn, void (*wait)()) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    wait();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) fn();
    wait();
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / n);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

double RawLaunchUs(int reps, bool blocking_stream) {
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  const weft::gpu::rtc::Kernel add =
      weft::gpu::rtc::KernelLibrary::Global().Get({"binary.cuh", "", "weft::BinaryForward<weft::Add, float, 4>", {}}, 0);
  float *a = nullptr, *b = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&a, 64));
  WEFT_CUDA_CHECK(cudaMalloc(&b, 64));
  static cudaStream_t stream = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, blocking_stream ? cudaStreamDefault : cudaStreamNonBlocking));
  long long n = 16;
  int req = 1;
  void* args[] = {&a, &b, &a, &n, &req};
  const double us = MedianUs(reps, 10000, [&] {
    WEFT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(add.handle()), dim3(1), dim3(256), args, 0, stream));
  },
                             [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); });
  cudaStreamDestroy(stream);
  cudaFree(a), cudaFree(b);
  return us;
}

double DriverLaunchUs(int reps) {
  using GetFunction = CUresult (*)(CUfunction*, CUkernel);
  using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    CUstream, void**, void**);
  void *get = nullptr, *launch = nullptr;
  cudaDriverEntryPointQueryResult found{};
  WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuKernelGetFunction", &get, 12000, cudaEnableDefault, &found));
  WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &launch, 12000, cudaEnableDefault, &found));
  if (get == nullptr || launch == nullptr) return -1;
  const weft::gpu::rtc::Kernel add =
      weft::gpu::rtc::KernelLibrary::Global().Get({"binary.cuh", "", "weft::BinaryForward<weft::Add, float, 4>", {}}, 0);
  CUfunction function = nullptr;
  if (reinterpret_cast<GetFunction>(get)(&function, reinterpret_cast<CUkernel>(add.handle())) != CUDA_SUCCESS) return -1;
  float *a = nullptr, *b = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&a, 64));
  WEFT_CUDA_CHECK(cudaMalloc(&b, 64));
  static cudaStream_t stream = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  long long n = 16;
  int req = 1;
  void* args[] = {&a, &b, &a, &n, &req};
  auto launch_fn = reinterpret_cast<LaunchKernel>(launch);
  const double us = MedianUs(reps, 10000, [&] { launch_fn(function, 1, 1, 1, 256, 1, 1, 0, stream, args, nullptr); },
                             [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); });
  cudaStreamDestroy(stream);
  cudaFree(a), cudaFree(b);
  return us;
}

GraphCosts GraphLaunchUs(int reps, int nodes) {
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  const weft::gpu::rtc::Kernel add =
      weft::gpu::rtc::KernelLibrary::Global().Get({"binary.cuh", "", "weft::BinaryForward<weft::Add, float, 4>", {}}, 0);
  float *a = nullptr, *b = nullptr;
  WEFT_CUDA_CHECK(cudaMalloc(&a, 64));
  WEFT_CUDA_CHECK(cudaMalloc(&b, 64));
  static cudaStream_t stream = nullptr;
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  long long n = 16;
  int req = 1;
  void* args[] = {&a, &b, &a, &n, &req};
  // A chain of `nodes` kernel nodes, built by hand.
  auto build = [&] {
    cudaGraph_t graph = nullptr;
    WEFT_CUDA_CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t last = nullptr;
    for (int i = 0; i < nodes; ++i) {
      cudaKernelNodeParams p{};
      p.func = reinterpret_cast<void*>(add.handle());
      p.gridDim = dim3(1), p.blockDim = dim3(256), p.kernelParams = args;
      cudaGraphNode_t node = nullptr;
      WEFT_CUDA_CHECK(cudaGraphAddKernelNode(&node, graph, last ? &last : nullptr, last ? 1 : 0, &p));
      last = node;
    }
    return graph;
  };
  GraphCosts costs;
  // (1) build, instantiate, launch each time.
  costs.instantiate_us = MedianUs(reps, 20, [&] {
    cudaGraph_t g = build();
    cudaGraphExec_t exec = nullptr;
    WEFT_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    WEFT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  }, [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); }) / nodes;
  // (2) build, update one cached executable graph, launch.
  cudaGraph_t first = build();
  cudaGraphExec_t cached = nullptr;
  WEFT_CUDA_CHECK(cudaGraphInstantiate(&cached, first, 0));
  costs.update_us = MedianUs(reps, 20, [&] {
    cudaGraph_t g = build();
    cudaGraphExecUpdateResultInfo info{};
    WEFT_CUDA_CHECK(cudaGraphExecUpdate(cached, g, &info));
    WEFT_CUDA_CHECK(cudaGraphLaunch(cached, stream));
    cudaGraphDestroy(g);
  }, [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); }) / nodes;
  // (3) launch the same executable graph again (the floor of replay).
  costs.replay_us = MedianUs(reps, 20, [&] { WEFT_CUDA_CHECK(cudaGraphLaunch(cached, stream)); },
                             [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); }) / nodes;
  cudaGraphExecDestroy(cached);
  cudaGraphDestroy(first);
  cudaStreamDestroy(stream);
  cudaFree(a), cudaFree(b);
  return costs;
}

double EmptyEngineOpUs(int reps) {
  weft::engine::Engine* engine = weft::engine::Engine::Get();
  weft::engine::VarHandle v = engine->NewVariable();
  const double us = MedianUs(reps, 10000, [&] {
    engine->PushSync([](weft::engine::RunContext) {}, weft::Device::Gpu(0), {}, {v});
  }, [] { weft::engine::Engine::Get()->WaitForAll(); });
  engine->DeleteVariable([](weft::engine::RunContext) {}, weft::Device::Cpu(), v);
  return us;
}

}  // namespace bench
