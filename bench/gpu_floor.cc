#include "bench/gpu_floor.h"

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
  const double us = MedianUs(reps, 10000, [&] { add.Launch(dim3(1), dim3(256), args, stream); },
                             [] { WEFT_CUDA_CHECK(cudaStreamSynchronize(stream)); });
  cudaStreamDestroy(stream);
  cudaFree(a), cudaFree(b);
  return us;
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
