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

// y = a + b on 16 floats: the tiny kernel every floor launches, its arguments and a stream. The
// stream is a static so that the wait lambdas (plain function pointers) can reach it.
struct TinyAdd {
  static inline cudaStream_t stream = nullptr;
  weft::gpu::rtc::Kernel kernel{nullptr};
  float *a = nullptr, *b = nullptr;
  long long n = 16;
  int req = 1;
  void* args[5] = {&a, &b, &a, &n, &req};

  explicit TinyAdd(bool blocking_stream = true) {
    WEFT_CUDA_CHECK(cudaSetDevice(0));
    kernel = weft::gpu::rtc::KernelLibrary::Global().Get(
        {"binary.cuh", "", "weft::BinaryForward<weft::fn::Add, float, 4>", {}}, 0);
    WEFT_CUDA_CHECK(cudaMalloc(&a, 64));
    WEFT_CUDA_CHECK(cudaMalloc(&b, 64));
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(
        &stream, blocking_stream ? cudaStreamDefault : cudaStreamNonBlocking));
  }
  ~TinyAdd() {
    cudaStreamDestroy(stream);
    cudaFree(a), cudaFree(b);
  }
  static void Wait() { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); }
};

}  // namespace

double RawLaunchUs(int reps, bool blocking_stream) {
  TinyAdd t(blocking_stream);
  const void* kernel = reinterpret_cast<const void*>(t.kernel.handle());
  return MedianUs(
      reps, 10000,
      [&] { WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(1), dim3(256), t.args, 0, t.stream)); },
      &TinyAdd::Wait);
}

double DriverLaunchUs(int reps) {
  using GetFunction = CUresult (*)(CUfunction*, CUkernel);
  using LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void**, void**);
  void *get = nullptr, *launch = nullptr;
  cudaDriverEntryPointQueryResult found{};
  WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuKernelGetFunction", &get, 12000,
                                                   cudaEnableDefault, &found));
  WEFT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &launch, 12000,
                                                   cudaEnableDefault, &found));
  if (get == nullptr || launch == nullptr) return -1;
  TinyAdd t;
  CUfunction function = nullptr;
  if (reinterpret_cast<GetFunction>(get)(
          &function, reinterpret_cast<CUkernel>(t.kernel.handle())) != CUDA_SUCCESS)
    return -1;
  auto launch_fn = reinterpret_cast<LaunchKernel>(launch);
  return MedianUs(
      reps, 10000, [&] { launch_fn(function, 1, 1, 1, 256, 1, 1, 0, t.stream, t.args, nullptr); },
      &TinyAdd::Wait);
}

GraphCosts GraphLaunchUs(int reps, int nodes) {
  TinyAdd t;
  cudaStream_t stream = t.stream;
  void** args = t.args;
  const weft::gpu::rtc::Kernel add = t.kernel;
  cudaKernelNodeParams p{};
  p.func = reinterpret_cast<void*>(add.handle());
  p.gridDim = dim3(1), p.blockDim = dim3(256), p.kernelParams = args;
  // A chain of `nodes` kernel nodes, built by hand.
  auto build = [&](std::vector<cudaGraphNode_t>* made = nullptr) {
    cudaGraph_t graph = nullptr;
    WEFT_CUDA_CHECK(cudaGraphCreate(&graph, 0));
    cudaGraphNode_t last = nullptr;
    for (int i = 0; i < nodes; ++i) {
      cudaGraphNode_t node = nullptr;
      WEFT_CUDA_CHECK(
          cudaGraphAddKernelNode(&node, graph, last ? &last : nullptr, last ? 1 : 0, &p));
      last = node;
      if (made != nullptr) made->push_back(node);
    }
    return graph;
  };
  GraphCosts costs;
  costs.build_us = MedianUs(
                       reps, 20, [&] { cudaGraphDestroy(build()); }, &TinyAdd::Wait) /
                   nodes;
  // Build, instantiate, launch each time.
  costs.instantiate_us = MedianUs(
                             reps, 20,
                             [&] {
                               cudaGraph_t g = build();
                               cudaGraphExec_t exec = nullptr;
                               WEFT_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
                               WEFT_CUDA_CHECK(cudaGraphLaunch(exec, stream));
                               cudaGraphExecDestroy(exec);
                               cudaGraphDestroy(g);
                             },
                             &TinyAdd::Wait) /
                         nodes;
  // Build, update one cached executable graph, launch.
  std::vector<cudaGraphNode_t> first_nodes;
  cudaGraph_t first = build(&first_nodes);
  cudaGraphExec_t cached = nullptr;
  WEFT_CUDA_CHECK(cudaGraphInstantiate(&cached, first, 0));
  costs.update_us = MedianUs(
                        reps, 20,
                        [&] {
                          cudaGraph_t g = build();
                          cudaGraphExecUpdateResultInfo info{};
                          WEFT_CUDA_CHECK(cudaGraphExecUpdate(cached, g, &info));
                          WEFT_CUDA_CHECK(cudaGraphLaunch(cached, stream));
                          cudaGraphDestroy(g);
                        },
                        &TinyAdd::Wait) /
                    nodes;
  // Set every node's parameters in the cached executable graph, launch.
  costs.set_params_us = MedianUs(
                            reps, 20,
                            [&] {
                              for (cudaGraphNode_t node : first_nodes)
                                WEFT_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(cached, node, &p));
                              WEFT_CUDA_CHECK(cudaGraphLaunch(cached, stream));
                            },
                            &TinyAdd::Wait) /
                        nodes;
  costs.set_params_host_us =
      MedianUs(
          reps, 20,
          [&] {
            for (cudaGraphNode_t node : first_nodes)
              WEFT_CUDA_CHECK(cudaGraphExecKernelNodeSetParams(cached, node, &p));
          },
          &TinyAdd::Wait) /
      nodes;
  // Launch the same executable graph again (the floor of replay).
  costs.replay_us =
      MedianUs(
          reps, 20, [&] { WEFT_CUDA_CHECK(cudaGraphLaunch(cached, stream)); }, &TinyAdd::Wait) /
      nodes;
  cudaGraphExecDestroy(cached);
  cudaGraphDestroy(first);
  return costs;
}

double KernelOnlyGbs(int reps, unsigned blocks, bool copy) {
  long long n = 64ll << 20;
  float *x = nullptr, *y = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  const auto relu = weft::gpu::rtc::KernelLibrary::Global().Get(
      {"unary.cuh", "", "weft::UnaryForward<weft::fn::Relu, float, 4>", {}}, 0);
  WEFT_CUDA_CHECK(cudaMalloc(&x, n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaMalloc(&y, n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaMemset(x, 0, n * sizeof(float)));
  WEFT_CUDA_CHECK(cudaStreamCreate(&stream));
  WEFT_CUDA_CHECK(cudaEventCreate(&start));
  WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  double scalar = 0;  // both of the kernel's scalars
  int req = 1;
  void* args[] = {&x, &y, &n, &scalar, &scalar, &req};
  const void* kernel = reinterpret_cast<const void*>(relu.handle());
  auto once = [&] {
    if (copy) {
      WEFT_CUDA_CHECK(cudaMemcpyAsync(y, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    } else {
      WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(blocks), dim3(256), args, 0, stream));
    }
  };
  std::vector<double> gbs;
  for (int r = 0; r < reps + 1; ++r) {  // the first repetition warms up
    WEFT_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < 20; ++i) once();
    WEFT_CUDA_CHECK(cudaEventRecord(stop, stream));
    WEFT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (r > 0) gbs.push_back(20 * 2.0 * n * sizeof(float) / (ms * 1e6));
  }
  cudaEventDestroy(start), cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  cudaFree(x), cudaFree(y);
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

double EmptyEngineOpUs(int reps) {
  weft::engine::Engine* engine = weft::engine::Engine::Get();
  weft::engine::VarHandle v = engine->NewVariable();
  const double us = MedianUs(
      reps, 10000,
      [&] { engine->PushSync([](weft::engine::RunContext) {}, weft::Device::Gpu(0), {}, {v}); },
      [] { weft::engine::Engine::Get()->WaitForAll(); });
  engine->DeleteVariable([](weft::engine::RunContext) {}, weft::Device::Cpu(), v);
  return us;
}

SpinningStream::SpinningStream(bool blocking, double ms) {
  static const char* kSource =
      "extern \"C\" __global__ void Spin(long long cycles) {\n"
      "  const long long start = clock64();\n"
      "  while (clock64() - start < cycles) {}\n"
      "}\n";
  WEFT_CUDA_CHECK(cudaSetDevice(0));
  const weft::gpu::rtc::Kernel spin =
      weft::gpu::rtc::KernelLibrary::Global().Get({"spin", kSource, "Spin", {}}, 0);
  int khz = 0;
  WEFT_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  long long cycles = static_cast<long long>(ms * khz);
  void* args[] = {&cycles};
  WEFT_CUDA_CHECK(
      cudaStreamCreateWithFlags(&stream_, blocking ? cudaStreamDefault : cudaStreamNonBlocking));
  WEFT_CUDA_CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(spin.handle()), dim3(1), dim3(1),
                                   args, 0, stream_));
}

SpinningStream::~SpinningStream() {
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

}  // namespace bench
