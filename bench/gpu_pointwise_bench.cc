// Bandwidth of the GPU pointwise ops against a device-to-device copy of the same bytes, on GPU 0:
// relu and add (one output array over 64M floats) should reach at least 90% of the copy.
//   bazel run --config=opt --config=cuda //bench:gpu_pointwise_bench
#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft {
namespace {

constexpr int64_t kElements = int64_t{64} << 20;
constexpr int kRepeats = 20;

// Milliseconds per call of `fn` on `stream`, after a warm-up call (which also compiles).
double TimeMs(cudaStream_t stream, const std::function<void()>& fn) {
  fn();
  cudaEvent_t start, stop;
  WEFT_CUDA_CHECK(cudaEventCreate(&start));
  WEFT_CUDA_CHECK(cudaEventCreate(&stop));
  WEFT_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kRepeats; ++i) fn();
  WEFT_CUDA_CHECK(cudaEventRecord(stop, stream));
  WEFT_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  WEFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / kRepeats;
}

int Main() {
  if (gpu::GpuCount() == 0) {
    std::printf("no CUDA GPU: %s\n", gpu::NoGpuReason().c_str());
    return 0;
  }
  const size_t bytes = kElements * sizeof(float);
  std::vector<void*> buffers(3);
  for (void*& b : buffers) {
    WEFT_CUDA_CHECK(cudaMalloc(&b, bytes));
    WEFT_CUDA_CHECK(cudaMemset(b, 0, bytes));
  }
  cudaStream_t stream;
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  OpContext ctx;
  ctx.run.device = Device::Gpu(0);
  ctx.run.stream = stream;
  std::vector<TensorView> views;
  for (void* b : buffers) views.emplace_back(b, Shape{kElements}, DType::kFloat32, Device::Gpu(0));
  const OpReq write = OpReq::kWrite;
  auto op = [&](const char* name, std::vector<TensorView> in) {
    const Op& o = GetOp(name);
    const Attrs attrs = ParseAttrs(o, {});
    return [&o, attrs, in, &views, &ctx, &write] {
      o.compute[static_cast<int>(DeviceType::kGpu)](ctx, attrs, in, {&write, 1}, {&views[2], 1});
    };
  };
  const double copy_ms = TimeMs(stream, [&] {
    WEFT_CUDA_CHECK(cudaMemcpyAsync(buffers[2], buffers[0], bytes, cudaMemcpyDeviceToDevice, stream));
  });
  const double relu_ms = TimeMs(stream, op("relu", {views[0]}));
  const double add_ms = TimeMs(stream, op("add", {views[0], views[1]}));
  auto report = [&](const char* name, double ms, double arrays) {
    std::printf("%-24s %8.3f ms %8.1f GB/s  %5.1f%% of the copy's bandwidth\n", name, ms, arrays * bytes / ms / 1e6,
                100 * (arrays / 2) * copy_ms / ms);
  };
  report("device-to-device copy", copy_ms, 2);
  report("relu (read 1, write 1)", relu_ms, 2);
  report("add (read 2, write 1)", add_ms, 3);
  for (void* b : buffers) cudaFree(b);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace weft

int main() { return weft::Main(); }
