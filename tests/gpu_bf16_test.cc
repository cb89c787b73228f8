// bfloat16 on the GPU: FullyConnected forward and backward (float32 accumulation) and the
// elementwise ops of an MLP, on bf16-exact inputs, against float32 on the CPU. The GPU rounds each
// result to bf16 once (FullyConnected's bias is added in cuBLASLt's epilogue, before the
// rounding), so it is within half a bf16 unit (2^-9 relative) of the float32 result, plus
// float32 summation-order noise.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "storage/ndarray.h"
#include "weft/imperative.h"

namespace weft {
namespace {

const Device kGpu = Device::Gpu(0);
constexpr double kBf16Tolerance = 4e-3;  // |gpu - cpu| <= tol * (1 + |cpu|): about one bf16 unit

// Random values that bf16 holds exactly (rounded through Cast on the CPU).
NDArray Bf16ExactCpu(const Shape& shape, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(shape.Size()));
  for (float& x : v) x = u(rng);
  NDArray bf16 = Invoke("Cast", {NDArray::FromVector(v, shape)}, {{"dtype", "bfloat16"}})[0];
  return Invoke("Cast", {bf16}, {{"dtype", "float32"}})[0];
}

NDArray ToGpuBf16(const NDArray& cpu_float) {
  return Invoke("Cast", {cpu_float}, {{"dtype", "bfloat16"}})[0].Copy(kGpu);
}

std::vector<float> ToHostFloat(const NDArray& gpu_bf16) {
  EXPECT_EQ(gpu_bf16.dtype(), DType::kBFloat16);
  return Invoke("Cast", {gpu_bf16.Copy(Device::Cpu())}, {{"dtype", "float32"}})[0]
      .ToVector<float>();
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_LE(std::abs(gpu[i] - cpu[i]), kBf16Tolerance * (1 + std::abs(cpu[i])))
        << what << ": element " << i << " is " << gpu[i] << " on the GPU, " << cpu[i]
        << " on the CPU";
  }
}

TEST(GpuBf16, FullyConnectedForwardAndBackwardMatchFloat32) {
  const AttrMap attrs = {{"num_hidden", "64"}};
  const std::vector<NDArray> cpu = {Bf16ExactCpu(Shape{32, 100}, 1),
                                    Bf16ExactCpu(Shape{64, 100}, 2), Bf16ExactCpu(Shape{64}, 3)};
  std::vector<NDArray> gpu;
  for (const NDArray& a : cpu) gpu.push_back(ToGpuBf16(a));
  const NDArray y_cpu = Invoke("FullyConnected", cpu, attrs)[0];
  const NDArray y_gpu = Invoke("FullyConnected", gpu, attrs)[0];
  ExpectClose(ToHostFloat(y_gpu), y_cpu.ToVector<float>(), "FullyConnected bf16 forward");

  const Op& fc = GetOp("FullyConnected");
  const Attrs parsed = ParseAttrs(fc, attrs);
  const NDArray dy_cpu = Bf16ExactCpu(y_cpu.shape(), 4), dy_gpu = ToGpuBf16(dy_cpu);
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    std::vector<NDArray> g_cpu, g_gpu;
    for (const NDArray& a : cpu) {
      g_cpu.emplace_back(a.shape());
      g_cpu.back().Fill(0.5);
      g_gpu.push_back(ToGpuBf16(g_cpu.back()));
    }
    InvokeBackward(fc, parsed, cpu, {y_cpu}, {dy_cpu}, g_cpu, std::vector<OpReq>(3, req));
    InvokeBackward(fc, parsed, gpu, {y_gpu}, {dy_gpu}, g_gpu, std::vector<OpReq>(3, req));
    for (int i = 0; i < 3; ++i) {
      ExpectClose(ToHostFloat(g_gpu[i]), g_cpu[i].ToVector<float>(),
                  "FullyConnected bf16 gradient of input " + std::to_string(i) +
                      (req == OpReq::kAddTo ? " (add)" : ""));
    }
  }
}

TEST(GpuBf16, ElementwiseOpsOfAnMlpMatchFloat32) {
  const NDArray a = Bf16ExactCpu(Shape{4, 300}, 5), b = Bf16ExactCpu(Shape{4, 300}, 6);
  for (const char* op : {"relu", "sigmoid", "tanh", "add", "mul"}) {
    const bool binary = std::string(op) == "add" || std::string(op) == "mul";
    const std::vector<NDArray> in_cpu =
        binary ? std::vector<NDArray>{a, b} : std::vector<NDArray>{a};
    std::vector<NDArray> in_gpu;
    for (const NDArray& x : in_cpu) in_gpu.push_back(ToGpuBf16(x));
    ExpectClose(ToHostFloat(Invoke(op, in_gpu)[0]), Invoke(op, in_cpu)[0].ToVector<float>(),
                std::string(op) + " bf16");
  }
}

TEST(GpuBf16, CastRoundsToNearestEvenLikeTheCpu) {
  const NDArray x = NDArray::FromVector(
      std::vector<float>{1.0f, 1.00390625f, 1.01171875f, -3.3f, 65504.5f, 1e-30f}, Shape{6});
  const NDArray cpu = Invoke("Cast", {x}, {{"dtype", "bfloat16"}})[0];
  const NDArray gpu = Invoke("Cast", {x.Copy(kGpu)}, {{"dtype", "bfloat16"}})[0];
  EXPECT_EQ(ToHostFloat(gpu), Invoke("Cast", {cpu}, {{"dtype", "float32"}})[0].ToVector<float>());
}

}  // namespace
}  // namespace weft
