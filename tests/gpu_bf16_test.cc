// bfloat16 on the GPU: FullyConnected and Convolution forward and backward (float32 accumulation)
// and the elementwise ops of an MLP, on bf16-exact inputs, against float32 on the CPU. The GPU
// rounds each result to bf16 once (FullyConnected's bias is added in cuBLASLt's epilogue,
// Convolution's is where its output starts, both before the rounding), so it is within half a
// bf16 unit (2^-9 relative) of the float32 result, plus float32 summation-order noise.
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
// A gradient added to a bf16 array is rounded twice (cuDNN's result, then the sum): up to one unit
// of the sum, 2^-7 relative. Seen on the H200: 3.5422 + 0.5 gave 4.0625 (3.5469 + 0.5 = 4.0469,
// a tie rounded to even), where float32 gives 4.0422.
constexpr double kBf16AddTolerance = 2 * kBf16Tolerance;

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
                 const std::string& what, double tolerance = kBf16Tolerance) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_LE(std::abs(gpu[i] - cpu[i]), tolerance * (1 + std::abs(cpu[i])))
        << what << ": element " << i << " is " << gpu[i] << " on the GPU, " << cpu[i]
        << " on the CPU";
  }
}

// `op` on the bf16 GPU copies of `cpu` (bf16-exact float32 arrays) against float32 on the CPU:
// forward, and the gradient rule with requests write and add.
void ExpectLayerMatchesFloat32(const std::string& op_name, const AttrMap& attrs,
                               const std::vector<NDArray>& cpu) {
  std::vector<NDArray> gpu;
  for (const NDArray& a : cpu) gpu.push_back(ToGpuBf16(a));
  const NDArray y_cpu = Invoke(op_name, cpu, attrs)[0];
  const NDArray y_gpu = Invoke(op_name, gpu, attrs)[0];
  ExpectClose(ToHostFloat(y_gpu), y_cpu.ToVector<float>(), op_name + " bf16 forward");

  const Op& op = GetOp(op_name);
  const Attrs parsed = ParseAttrs(op, attrs);
  const NDArray dy_cpu = Bf16ExactCpu(y_cpu.shape(), 4), dy_gpu = ToGpuBf16(dy_cpu);
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    std::vector<NDArray> g_cpu, g_gpu;
    for (const NDArray& a : cpu) {
      g_cpu.emplace_back(a.shape());
      g_cpu.back().Fill(0.5);
      g_gpu.push_back(ToGpuBf16(g_cpu.back()));
    }
    const std::vector<OpReq> reqs(cpu.size(), req);
    InvokeBackward(op, parsed, cpu, {y_cpu}, {dy_cpu}, g_cpu, reqs);
    InvokeBackward(op, parsed, gpu, {y_gpu}, {dy_gpu}, g_gpu, reqs);
    for (size_t i = 0; i < cpu.size(); ++i) {
      ExpectClose(ToHostFloat(g_gpu[i]), g_cpu[i].ToVector<float>(),
                  op_name + " bf16 gradient of input " + std::to_string(i) +
                      (req == OpReq::kAddTo ? " (add)" : ""),
                  req == OpReq::kAddTo ? kBf16AddTolerance : kBf16Tolerance);
    }
  }
}

TEST(GpuBf16, FullyConnectedForwardAndBackwardMatchFloat32) {
  ExpectLayerMatchesFloat32("FullyConnected", {{"num_hidden", "64"}},
                            {Bf16ExactCpu(Shape{32, 100}, 1), Bf16ExactCpu(Shape{64, 100}, 2),
                             Bf16ExactCpu(Shape{64}, 3)});
}

// cuDNN on bf16 tensors, computing in float: plain, and grouped, dilated, strided and padded, the
// bias added before the one rounding.
TEST(GpuBf16, ConvolutionForwardAndBackwardMatchFloat32) {
  ExpectLayerMatchesFloat32("Convolution",
                            {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "8"}},
                            {Bf16ExactCpu(Shape{4, 6, 10, 9}, 5),
                             Bf16ExactCpu(Shape{8, 6, 3, 3}, 6), Bf16ExactCpu(Shape{8}, 7)});
  ExpectLayerMatchesFloat32("Convolution",
                            {{"kernel", "(3, 2)"},
                             {"stride", "(2, 1)"},
                             {"pad", "(2, 1)"},
                             {"dilate", "(2, 2)"},
                             {"num_filter", "8"},
                             {"num_group", "2"}},
                            {Bf16ExactCpu(Shape{2, 4, 11, 8}, 8),
                             Bf16ExactCpu(Shape{8, 2, 3, 2}, 9), Bf16ExactCpu(Shape{8}, 10)});
  ExpectLayerMatchesFloat32(  // depthwise, no bias
      "Convolution",
      {{"kernel", "(3, 3)"}, {"num_filter", "6"}, {"num_group", "6"}, {"no_bias", "true"}},
      {Bf16ExactCpu(Shape{2, 6, 7, 7}, 11), Bf16ExactCpu(Shape{6, 1, 3, 3}, 12)});
}

// weft's kernels on bf16 (float arithmetic): max and average windows, padded, strided, ceil mode
// (a window past the padding), global.
TEST(GpuBf16, PoolingForwardAndBackwardMatchFloat32) {
  const NDArray x = Bf16ExactCpu(Shape{2, 3, 9, 8}, 13);
  ExpectLayerMatchesFloat32("Pooling",
                            {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}}, {x});
  ExpectLayerMatchesFloat32("Pooling",
                            {{"kernel", "(2, 3)"},
                             {"stride", "(2, 2)"},
                             {"pool_type", "avg"},
                             {"pooling_convention", "full"},
                             {"count_include_pad", "false"}},
                            {x});
  ExpectLayerMatchesFloat32("Pooling", {{"global_pool", "true"}, {"pool_type", "avg"}}, {x});
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
